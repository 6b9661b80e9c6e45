package zkstore

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestElectionRelooksHoldNoMoreWatches: a quiet election looks again every
// relook period; each look must reuse the watch still pending on the same
// znode, not set a new one with a goroutine waiting on it (which grew by
// one goroutine per instance per look until the session ended).
func TestElectionRelooksHoldNoMoreWatches(t *testing.T) {
	srv := zkservertest.Standalone(t)
	var elections []*Election
	for id := uint64(1); id <= 3; id++ {
		e := openTestStore(t, srv.Addr(), "/relook").campaign(id, 10*time.Millisecond)
		t.Cleanup(e.Close)
		elections = append(elections, e)
	}
	testutil.Eventually(t, 10*time.Second, "member 1 elected, as all know", func() bool {
		leader, _, id := elections[0].State()
		_, _, id2 := elections[2].State()
		return leader && id == 1 && id2 == 1
	})
	before := electionGoroutines()
	// A negative (no goroutine per look), so a bounded wait: a quiet
	// second is ~100 looks per instance.
	time.Sleep(time.Second)
	after := electionGoroutines()
	t.Logf("goroutines in zkstore's election: %d, after ~100 looks each: %d", before, after)
	if after > before {
		t.Errorf("election goroutines grew from %d to %d over a quiet second of re-looks", before, after)
	}
	for _, e := range elections {
		if !e.watchesPredecessor() {
			t.Errorf("member %d holds no pending watch on its predecessor", e.memberID)
		}
	}
	// The watches still work: the leader going makes the next one lead.
	elections[0].Close()
	testutil.Eventually(t, 10*time.Second, "member 2 takes over when member 1 withdrew", func() bool {
		leader, _, _ := elections[1].State()
		_, _, id := elections[2].State()
		return leader && id == 2
	})
}

// electionGoroutines counts the goroutines running zkstore's election code.
func electionGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("zkstore.(*Election)")) {
			n++
		}
	}
	return n
}

// openTestStore opens a store on the ZooKeeper at addr under root, closed
// at the test's end.
func openTestStore(t *testing.T, addr, root string) *Store {
	t.Helper()
	lg := testutil.Logger(logrus.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := Open(ctx, Config{Servers: []string{addr}, Root: root, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}
