package engine

// The leader's tailer does not set a new head watch after each of its own
// commits (tail.go's deferRearm), yet still sees anyone else's.

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/testutil"
)

// forwardingLeader starts the only committer (ForwardWrites) on st, its
// commits taking rtt each, and waits until it leads.
func forwardingLeader(t *testing.T, st *memlog.Store, rtt time.Duration) *Engine {
	t.Helper()
	b := slowEngineWith(t, st, "a", rtt, func(c *Config) { c.ForwardWrites = true })
	testutil.Eventually(t, 5*time.Second, "a leads", func() bool { l, _ := b.Leader(); return l })
	return b
}

func TestLeaderDoesNotRearmTheHeadWatchPerCommit(t *testing.T) {
	st := memlog.New(memlog.Options{})
	b := forwardingLeader(t, st, time.Millisecond)
	before := st.HeadWatches()
	const puts = 200
	for i := range puts {
		put(t, b, fmt.Sprintf("k%d", i), "v")
	}
	// Each commit (1 ms) fires the watch; without the deferral nearly every
	// one is followed by a new watch.
	if n := st.HeadWatches() - before; n > puts/3 {
		t.Fatalf("%d head watches set during %d sequential puts, want far fewer", n, puts)
	}
}

func TestLeaderSeesAForeignCommitWhileItCommits(t *testing.T) {
	st := memlog.New(memlog.Options{})
	b := forwardingLeader(t, st, 0)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := b.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("busy%d", i%10)), Value: []byte("v")})
			cancel()
			if err != nil {
				t.Errorf("put: %v", err)
				return
			}
		}
	}()
	busy := st.Commits()
	testutil.Eventually(t, 5*time.Second, "the leader is busy committing", func() bool { return st.Commits() >= busy+5 })
	lsn := st.AppendForeignPut()
	testutil.Eventually(t, 3*time.Second, "the busy leader applied the foreign entry", func() bool { return b.State().LSN >= lsn })
	close(stop)
	<-done
	if kv := get(t, b, memlog.ForeignKey, true).Kvs; len(kv) != 1 {
		t.Fatalf("%s = %v", memlog.ForeignKey, kv)
	}
	checkLogReplaysToView(t, st, b)

	// Quiet leader: the watch is set again within rearmQuiet of the last
	// commit, so a foreign entry is seen without a probe. The quiet period
	// (real time, 10 ms) is what is under test: wait it out.
	time.Sleep(2 * rearmQuiet)
	lsn = st.AppendForeignPut()
	testutil.Eventually(t, 500*time.Millisecond, "the quiet leader applied the foreign entry (before the 1 s probe)",
		func() bool { return b.State().LSN >= lsn })
}
