package rvmap_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/rvmap"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

func TestIndexMapsRevisionsToZxids(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{})
	c := in.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var revs []int64
	for _, v := range []string{"1", "2", "3"} {
		r, err := c.Put(ctx, "k", v)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r.Header.Revision)
	}
	lg := testutil.Logger(logrus.WarnLevel)
	st, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{zk.Addr()}, Root: in.Root(), Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ix, err := rvmap.Load(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	k := ix.Key("k")
	if !k.Found || k.CreateRevision != revs[0] || k.ModRevision != revs[2] || k.Version != 3 {
		t.Fatalf("key k: %+v, want create %d mod %d version 3", k, revs[0], revs[2])
	}
	var prev int64
	for i, rev := range revs {
		m := ix.Revision(rev)
		if !m.Found || m.Zxid <= prev {
			t.Fatalf("revision %d: %+v (previous zxid 0x%x)", rev, m, prev)
		}
		prev = m.Zxid
		czxid, err := st.EntryZxid(m.LSN)
		if err != nil || czxid != m.Zxid {
			t.Fatalf("revision %d: entry %d has czxid 0x%x (%v), index says 0x%x", rev, m.LSN, czxid, err, m.Zxid)
		}
		if (i == 0 && m.Zxid != k.CreateZxid) || (i == 2 && m.Zxid != k.ModZxid) {
			t.Fatalf("revision %d zxid 0x%x, key czxid 0x%x mzxid 0x%x", rev, m.Zxid, k.CreateZxid, k.ModZxid)
		}
	}
	if m := ix.Revision(1); !m.Sentinel {
		t.Fatalf("revision 1: %+v, want the sentinel", m)
	}
	if m := ix.Revision(revs[2] + 100); m.Found {
		t.Fatalf("future revision found: %+v", m)
	}
	var out bytes.Buffer
	if err := ix.WriteTable(&out, []string{"k", "missing"}, []int64{1, revs[1]}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"KEY", rvmap.ZxidString(k.ModZxid), "(empty store)", "missing   -"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestIndexSaysWhenARevisionWasCompactedAway(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{})
	c := in.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put := func() int64 {
		r, err := c.Put(ctx, "k", "v")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	old := put()
	// Two physical compactions: the second removes the log entries below
	// the first one's base generation.
	for round := 0; round < 2; round++ {
		rev := put()
		put()
		if _, err := c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
	}
	lg := testutil.Logger(logrus.WarnLevel)
	cfg := zkstore.Config{Servers: []string{zk.Addr()}, Root: in.Root(), Logger: lg}
	var ix *rvmap.Index
	testutil.Eventually(t, 20*time.Second, fmt.Sprintf("revision %d compacted away after two physical compactions", old), func() bool {
		var err error
		if ix, err = rvmap.Open(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		m := ix.Revision(old)
		return m.Compacted && !m.Found && !m.Future
	})
	if f := ix.Revision(ix.Head.Rev + 1); !f.Future || f.Compacted {
		t.Fatalf("revision after the head: %+v", f)
	}
	var out bytes.Buffer
	if err := ix.WriteTable(&out, nil, []int64{old}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "compacted into the base generation") {
		t.Fatalf("table does not say the revision was compacted:\n%s", out.String())
	}
}
