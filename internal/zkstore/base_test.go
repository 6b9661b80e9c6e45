package zkstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// A compaction that wrote its base generation's chunks and failed before
// publishing is retried at the same log position after the root's format
// was raised (a rolling upgrade): the retry writes compressed chunks, fewer
// and other bytes than the first attempt's uncompressed ones. The retry
// goes to a fresh path, so the published generation holds only its own
// chunks and loads as the state it was taken from.
func TestABaseRetriedAfterAFormatRaiseNeverReadsTheEarlierAttemptsChunks(t *testing.T) {
	srv := zkservertest.Standalone(t)
	s := openStoreWith(t, Config{Servers: []string{srv.Addr()}, Root: "/retried", BaseChunkBytes: 4 << 10})
	raw, _, err := zk.Connect([]string{srv.Addr()}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	setFormat := func(f int) {
		t.Helper()
		meta, _ := json.Marshal(Meta{Format: f, ClusterID: s.Meta().ClusterID})
		if _, err := raw.Set(s.l.meta(), meta, -1); err != nil {
			t.Fatal(err)
		}
		if got, err := s.RefreshFormat(); err != nil || got != f {
			t.Fatalf("format %d after setting %d: %v", got, f, err)
		}
	}
	v := revision.NewView(1, 1)
	var cs []revision.Change
	for i := range 200 {
		cs = append(cs, revision.Change{Key: []byte(fmt.Sprintf("/registry/configmaps/ns/cm-%03d", i)), Value: []byte(strings.Repeat("data ", 40))})
	}
	if _, err := v.Apply(&revision.Entry{LSN: 2, Zxid: 2, Ops: []revision.Op{{Kind: revision.OpTxn, Rev: 2, Changes: cs}}}); err != nil {
		t.Fatal(err)
	}
	snap := v.Snapshot()
	ctx := context.Background()
	cur, err := s.ReadBase()
	if err != nil {
		t.Fatal(err)
	}

	setFormat(1)
	first, err := s.PrepareBase(ctx, snap, cur, 7) // never published: its compaction failed
	if err != nil {
		t.Fatal(err)
	}
	setFormat(compressionMetaFormat)
	nb, err := s.PrepareBase(ctx, snap, cur, 7)
	if err != nil {
		t.Fatal(err)
	}
	if nb.Chunks >= first.Chunks {
		t.Fatalf("the compressed attempt has %d chunks, the uncompressed %d: the test does not test", nb.Chunks, first.Chunks)
	}
	pub, err := s.PublishBase(Fence{path: s.l.meta()}, nb)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := s.LoadBase(ctx, pub)
	if err != nil {
		t.Fatalf("load the retried generation (%s; the first attempt wrote %s): %v", pub.Path, first.Path, err)
	}
	if got, want := dumpSnap(loaded), dumpSnap(snap); got != want {
		t.Fatalf("loaded\n%s\nwant\n%s", got, want)
	}
}
