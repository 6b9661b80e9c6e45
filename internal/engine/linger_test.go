package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// lingerRun has writers clients put rounds times each, pausing pause
// between their puts (as a kube-apiserver does between its requests), on
// a log whose commits take commitTime, at a fixed depth of 1; it returns
// the entries committed and the committer's waits.
func lingerRun(t *testing.T, linger time.Duration, writers, rounds int, pause, commitTime time.Duration) (entries int32, lingers int64) {
	t.Helper()
	st := memlog.New(memlog.Options{})
	var commits atomic.Int32
	st.SetCommitFault(func(zkstore.CommitRequest) memlog.Fault {
		commits.Add(1)
		time.Sleep(commitTime)
		return memlog.NoFault
	})
	b, _ := engine(t, st, "a", func(c *Config) {
		c.CommitPipeline = 1
		c.CommitLinger = linger
	})
	before := commits.Load()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				put(t, b, fmt.Sprintf("w%d", w), fmt.Sprint(i))
				time.Sleep(time.Duration(w) * pause)
			}
		})
	}
	wg.Wait()
	return commits.Load() - before, b.commit.lingers.Load()
}

// TestCommitLingerKeepsStaggeredClientsInOneEntry: clients answered by one
// entry that come back a little apart leave together when the committer
// may linger, instead of the first of them leaving alone and splitting the
// rest; turned off, nothing waits.
func TestCommitLingerKeepsStaggeredClientsInOneEntry(t *testing.T) {
	const writers, rounds = 6, 15
	entries0, lingers0 := lingerRun(t, -1, writers, rounds, time.Millisecond, 2*time.Millisecond)
	entries1, lingers1 := lingerRun(t, 40*time.Millisecond, writers, rounds, time.Millisecond, 2*time.Millisecond)
	t.Logf("entries for %d puts: %d without lingering, %d with (%d waits)", writers*rounds, entries0, entries1, lingers1)
	if lingers0 != 0 {
		t.Fatalf("%d waits without CommitLinger", lingers0)
	}
	if lingers1 == 0 || entries1 >= entries0 {
		t.Fatalf("with CommitLinger: %d entries (%d waits), without: %d; want fewer entries", entries1, lingers1, entries0)
	}
}

// TestCommitLingerNeverDelaysALoneClient: entries of one request never
// wait, whatever the setting.
func TestCommitLingerNeverDelaysALoneClient(t *testing.T) {
	entries, lingers := lingerRun(t, 40*time.Millisecond, 1, 20, 0, 0)
	if lingers != 0 || entries != 20 {
		t.Fatalf("one client: %d entries for 20 puts, %d waits; want 20 and none", entries, lingers)
	}
}

func TestCommitLingerOutOfRangeIsRefused(t *testing.T) {
	for _, d := range []time.Duration{MaxCommitLinger + time.Millisecond, time.Hour} {
		c := Config{Name: "a", CommitLinger: d}
		c.setDefaults()
		if err := c.Validate(); err == nil {
			t.Errorf("CommitLinger %v accepted", d)
		}
	}
}
