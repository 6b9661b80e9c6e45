package watchbridge

import (
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/revision"
)

// TestRevisionGapsMoveTheHubAndItsProgress: on a mirrored root (revision
// gaps, revision.OpBumpRev), an entry that only moves the revision moves
// the hub's revision too, so a progress notification announces it (a
// kube-apiserver's consistent read waits for progress at the revision a
// Range answered with), and a watch started inside a gap gets the events
// after it exactly once.
func TestRevisionGapsMoveTheHubAndItsProgress(t *testing.T) {
	f := newFixture(t)
	f.put("a") // 2
	f.apply(revision.Op{Kind: revision.OpBumpRev, Rev: 9},
		revision.Op{Kind: revision.OpTxn, Rev: 10, Changes: []revision.Change{{Key: []byte("a"), Value: []byte("10")}}})
	f.apply(revision.Op{Kind: revision.OpBumpRev, Rev: 30})
	if got := f.h.Rev(); got != 30 {
		t.Fatalf("hub revision after a bump-only entry: %d, want 30", got)
	}
	s := f.h.NewStream(0)
	defer s.Close()
	if _, err := s.Watch(AutoWatchID, []byte("a"), nil, 5); err != nil {
		t.Fatal(err)
	}
	rs := collect(t, s, 10*time.Second, upTo(10))
	checkExactlyOnce(t, rs, 0, 10, 10, 1)
	if !s.RequestProgressAll() {
		t.Fatal("no progress for a synced watcher")
	}
	select {
	case r := <-s.Chan():
		if len(r.Events) != 0 || r.Revision != 30 {
			t.Fatalf("progress: %+v, want revision 30", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no progress notification")
	}
	f.mu.Lock()
	f.rev = 30
	f.mu.Unlock()
	f.put("a") // 31
	rs = collect(t, s, 10*time.Second, upTo(31))
	checkExactlyOnce(t, rs, 0, 31, 31, 1)
}
