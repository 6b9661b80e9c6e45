package zkstore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/engine/logtest"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// sharedZK is one ZooKeeper shared by the contract's tests, each on a root
// of its own.
var sharedZK = zkservertest.NewShared("zkstore", zkserver.Options{})

func TestMain(m *testing.M) { os.Exit(sharedZK.Run(m)) }

// TestTheLogContract runs the engine's log contract (the suite memlog
// passes too) on ZooKeeper.
func TestTheLogContract(t *testing.T) {
	addr := sharedZK.Addr(t)
	logtest.Run(t, func(t *testing.T) func() engine.Log {
		root := sharedZK.FreshRoot()
		lg := testutil.Logger(logrus.WarnLevel)
		return func() engine.Log {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{addr}, Root: root, SessionTimeout: 4 * time.Second, Logger: lg})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			return st
		}
	})
}
