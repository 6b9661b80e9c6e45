package zkstore

import (
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestElectionYieldHandsLeadershipToTheNextMember: the leader that yields
// stops leading at once, its fence's znode is gone (a multi fenced by it
// fails), and the next member leads while the one that yielded stands
// again behind it; a member that does not lead, or leads alone, keeps its
// place.
func TestElectionYieldHandsLeadershipToTheNextMember(t *testing.T) {
	srv := zkservertest.Standalone(t)
	alone := openTestStore(t, srv.Addr(), "/yield-alone").campaign(9, 10*time.Millisecond)
	t.Cleanup(alone.Close)
	testutil.Eventually(t, 10*time.Second, "a lone member leads", func() bool { l, _, _ := alone.State(); return l })
	if alone.Yield() {
		t.Fatal("a member alone in its election yielded")
	}
	if l, _, _ := alone.State(); !l {
		t.Fatal("a member alone in its election stopped leading")
	}

	var es []*Election
	for id := uint64(1); id <= 3; id++ {
		e := openTestStore(t, srv.Addr(), "/yield").campaign(id, 10*time.Millisecond)
		t.Cleanup(e.Close)
		es = append(es, e)
		// In order: member 1's znode first.
		testutil.Eventually(t, 10*time.Second, "member standing", func() bool { _, _, id := e.State(); return id == 1 })
	}
	if es[1].Yield() {
		t.Fatal("a member that does not lead yielded")
	}
	_, fence, _ := es[0].State()
	if !es[0].Yield() {
		t.Fatal("the leader did not yield")
	}
	if l, _, _ := es[0].State(); l {
		t.Fatal("the member that yielded still reports leading")
	}
	if ok, _, err := es[0].s.conn.Exists(fence.Path()); err != nil || ok {
		t.Fatalf("the fence's znode %s after the yield: exists %v, %v", fence.Path(), ok, err)
	}
	testutil.Eventually(t, 10*time.Second, "member 2 leads, as all know", func() bool {
		l, _, _ := es[1].State()
		_, _, id0 := es[0].State()
		_, _, id2 := es[2].State()
		return l && id0 == 2 && id2 == 2
	})
	// The one that yielded stands last: member 2 yielding hands over to 3.
	if !es[1].Yield() {
		t.Fatal("member 2 did not yield")
	}
	testutil.Eventually(t, 10*time.Second, "member 3 leads", func() bool {
		l, _, _ := es[2].State()
		_, _, id0 := es[0].State()
		return l && id0 == 3
	})
}
