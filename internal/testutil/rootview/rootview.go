// Package rootview reads back what a zketcd root on ZooKeeper holds, as
// an instance recovers it, for tests of what writes roots other than the
// engine (snapshot restore, mirror): the recovered view and a text dump of
// it to compare.
package rootview

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// StoreConfig is the configuration of root on zk, a test binary's shared
// ZooKeeper ("": a fresh root there), with a logger of warnings and
// errors: how a test writes a root before Recovered reads it back.
func StoreConfig(t testing.TB, zk *zkservertest.Shared, root string) zkstore.Config {
	if root == "" {
		root = zk.FreshRoot()
	}
	return zkstore.Config{Servers: []string{zk.Addr(t)}, Root: root, Logger: testutil.Logger(logrus.WarnLevel)}
}

// Recovered returns the view an instance recovers from cfg's root (its
// base generation and the log after it), failing the test on an error.
func Recovered(t testing.TB, cfg zkstore.Config) *revision.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := zkstore.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("rootview: open %s: %v", cfg.Root, err)
	}
	defer st.Close()
	v, _, _, err := engine.Replay(ctx, st, 8, nil)
	if err != nil {
		t.Fatalf("rootview: replay %s: %v", cfg.Root, err)
	}
	return v.Snapshot()
}

// Dump lists a view's revision, every retained version of its keys (value,
// create and mod revision, version, lease) and its leases (ID and granted
// TTL), one per line: what a copy of the view must reproduce. Zxids and
// remaining TTLs, which a copy does not share, are left out.
func Dump(s *revision.Snapshot) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "rev %d\n", s.State.Rev)
	s.Each(func(k revision.KeyHistory) bool {
		for _, kv := range k.Versions {
			fmt.Fprintf(&b, "%s=%s c%d m%d v%d l%x\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
		}
		return true
	})
	for _, l := range s.Leases {
		fmt.Fprintf(&b, "lease %x ttl %d\n", l.ID, l.TTL)
	}
	return b.String()
}
