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
	"github.com/zketcd/zketcd/internal/revision"
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

// TestIndexNamesRevisionGaps: on a root with revision gaps (a mirrored
// prefix: revision.OpBumpRev), a skipped revision is a gap, named with the
// entry that moved past it, not "not found" or "compacted".
func TestIndexNamesRevisionGaps(t *testing.T) {
	zk := zkservertest.Standalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	st, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{zk.Addr()}, Root: "/gaps", Logger: logrus.NewEntry(lg)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	put := func(rev int64) revision.Op {
		return revision.Op{Kind: revision.OpTxn, Rev: rev, Changes: []revision.Change{{Key: []byte("k"), Value: []byte(fmt.Sprint(rev))}}}
	}
	for i, ops := range [][]revision.Op{
		{put(2)},
		{{Kind: revision.OpBumpRev, Rev: 9}, put(10), put(11)},
		{{Kind: revision.OpBumpRev, Rev: 20}},
	} {
		e := &revision.Entry{LSN: int64(i + 2), Writer: revision.WriterTag{Nonce: 7, Seq: uint64(i)}, Ops: ops}
		if res, err := st.Commit(ctx, zkstore.CommitRequest{Prev: int64(i + 1), Entry: e, Rev: e.EndRev()}); err != nil || res.Outcome != zkstore.Committed {
			t.Fatalf("commit %d: %+v %v", i, res, err)
		}
	}
	ix, err := rvmap.Load(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rev      int64
		found    bool
		gap      bool
		lsn      int64
		future   bool
		compactd bool
	}{
		{2, true, false, 2, false, false},
		{3, false, true, 3, false, false},
		{9, false, true, 3, false, false},
		{10, true, false, 3, false, false},
		{11, true, false, 3, false, false},
		{12, false, true, 4, false, false},
		{20, false, true, 4, false, false},
		{21, false, false, 0, true, false},
	} {
		m := ix.Revision(tc.rev)
		if m.Found != tc.found || m.Gap != tc.gap || m.LSN != tc.lsn || m.Future != tc.future || m.Compacted != tc.compactd {
			t.Errorf("revision %d: %+v", tc.rev, m)
		}
	}
	var out bytes.Buffer
	if err := ix.WriteTable(&out, nil, []int64{15}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "a revision gap") {
		t.Errorf("table:\n%s", out.String())
	}
}
