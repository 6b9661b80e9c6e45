package engine

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
)

// TestTailerAppliesRevisionGaps: entries of a mirrored root that skip
// revisions (OpBumpRev, before a transaction or alone) are tailed and
// applied: reads inside a gap answer the state before it, the header
// carries the bumped revision, the committer's next write takes the
// revision after it, and a replay of the log gives the same view.
func TestTailerAppliesRevisionGaps(t *testing.T) {
	st := memlog.New(memlog.Options{})
	b, _ := engine(t, st, "a", nil)
	x := func(v string) []revision.Change { return []revision.Change{{Key: []byte("x"), Value: []byte(v)}} }
	st.AppendForeign([]revision.Op{{Kind: revision.OpTxn, Rev: 2, Changes: x("2")}})
	st.AppendForeign([]revision.Op{{Kind: revision.OpBumpRev, Rev: 40}, {Kind: revision.OpTxn, Rev: 41, Changes: x("41")}})
	lsn := st.AppendForeign([]revision.Op{{Kind: revision.OpBumpRev, Rev: 77}})
	testutil.Eventually(t, 3*time.Second, "tailer applied the gaps", func() bool { return b.State().LSN >= lsn })
	if st := b.State(); st.Rev != 77 {
		t.Fatalf("view at revision %d, want 77", st.Rev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		rev  int64
		want string
	}{{2, "2"}, {20, "2"}, {40, "2"}, {41, "41"}, {60, "41"}, {77, "41"}} {
		resp, err := b.Range(ctx, &pb.RangeRequest{Key: []byte("x"), Revision: tc.rev})
		if err != nil {
			t.Fatalf("x@%d: %v", tc.rev, err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != tc.want || resp.Header.Revision != 77 {
			t.Fatalf("x@%d: %v (header %d), want %q at header 77", tc.rev, resp.Kvs, resp.Header.Revision, tc.want)
		}
	}
	if rev := put(t, b, "y", "1"); rev != 78 {
		t.Fatalf("the write after the gap took revision %d, want 78", rev)
	}
	checkLogReplaysToView(t, st, b)
}
