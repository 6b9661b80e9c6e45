package memlog_test

import (
	"testing"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/engine/logtest"
	"github.com/zketcd/zketcd/internal/engine/memlog"
)

// TestTheLogContract runs the engine's log contract (the same suite that
// zkstore passes on a real ZooKeeper) on the in-memory log.
func TestTheLogContract(t *testing.T) {
	logtest.Run(t, func(t *testing.T) func() engine.Log {
		st := memlog.New(memlog.Options{})
		return func() engine.Log {
			c := st.Client()
			t.Cleanup(c.Close)
			return c
		}
	})
}
