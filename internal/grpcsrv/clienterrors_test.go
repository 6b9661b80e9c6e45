package grpcsrv_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/testutil/memserver"
	"github.com/zketcd/zketcd/internal/zkstore"

	"google.golang.org/grpc/status"

	"google.golang.org/grpc/codes"
)

// errNoLeaderOrDeadline stands for either of etcd's "no leader" and the
// client's own deadline.
var errNoLeaderOrDeadline = errors.New("no leader, or the deadline")

// TestClientsSeeEtcdsErrorsWhenTheLogFails: through a real gRPC server of
// an engine on memlog, what the log's failures become for an etcd client:
// etcd's errors, never the log's text.
func TestClientsSeeEtcdsErrorsWhenTheLogFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(st *memlog.Store)
		call  func(ctx context.Context, c *clientv3.Client) error
		want  error
	}{
		// The write fails at once (no leader) or waits for ZooKeeper to
		// come back until the client's deadline, depending on when the
		// engine notices; either way nothing of the log.
		{"a write while ZooKeeper is unreachable",
			func(st *memlog.Store) { st.SetUnavailable(true) },
			func(ctx context.Context, c *clientv3.Client) error {
				ctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				_, err := c.Put(ctx, "k", "v")
				return err
			},
			errNoLeaderOrDeadline},
		{"a linearizable read while ZooKeeper is unreachable",
			func(st *memlog.Store) { st.SetUnavailable(true) },
			func(ctx context.Context, c *clientv3.Client) error { _, err := c.Get(ctx, "k"); return err },
			rpctypes.ErrNoLeader},
		{"a write whose outcome was lost",
			func(st *memlog.Store) {
				st.SetCommitFault(func(zkstore.CommitRequest) memlog.Fault { return memlog.UnknownLost })
			},
			func(ctx context.Context, c *clientv3.Client) error { _, err := c.Put(ctx, "k", "v"); return err },
			rpctypes.ErrTimeoutDueToConnectionLost},
		{"a read at a future revision", nil,
			func(ctx context.Context, c *clientv3.Client) error {
				_, err := c.Get(ctx, "k", clientv3.WithRev(1000))
				return err
			},
			rpctypes.ErrFutureRev},
		{"a read below the compaction", nil,
			func(ctx context.Context, c *clientv3.Client) error {
				var rev int64
				for range 3 {
					resp, err := c.Put(ctx, "k", "v")
					if err != nil {
						return err
					}
					rev = resp.Header.Revision
				}
				if _, err := c.Compact(ctx, rev); err != nil {
					return err
				}
				_, err := c.Get(ctx, "k", clientv3.WithRev(rev-1))
				return err
			},
			rpctypes.ErrCompacted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := memserver.Start(t, memserver.Options{})
			c := s.Client(t)
			if tc.fault != nil {
				tc.fault(s.Store)
			}
			err := tc.call(testutil.Context(t, 20*time.Second), c)
			switch {
			case tc.want == errNoLeaderOrDeadline && (errors.Is(err, rpctypes.ErrNoLeader) || status.Code(err) == codes.DeadlineExceeded ||
				errors.Is(err, context.DeadlineExceeded)): // the client's retry ends with its context's own error
			case errors.Is(err, tc.want):
			default:
				t.Fatalf("%v, want %v", err, tc.want)
			}
			if low := strings.ToLower(err.Error()); strings.Contains(low, "zookeeper") || strings.Contains(low, "injected") || strings.Contains(low, "zk:") {
				t.Fatalf("the client read the log's text: %q", err)
			}
		})
	}
}

// TestAHaltedInstanceRefusesRequestsAsCorruptAndStatusSaysWhy: the log
// going back under the engine halts it; the gRPC layer learns of that
// through the engine's Halted channel: requests fail with etcd's corrupt
// error, and Status names what happened beside "no leader".
func TestAHaltedInstanceRefusesRequestsAsCorruptAndStatusSaysWhy(t *testing.T) {
	s := memserver.Start(t, memserver.Options{})
	c := s.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	fork := s.Store.HeadNow()
	for range 2 {
		if _, err := c.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Store.RollBack(fork.LSN); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the engine halts", func() bool {
		select {
		case <-s.Engine.Halted():
			return true
		default:
			return false
		}
	})
	if _, err := c.Put(ctx, "k", "v"); !errors.Is(err, rpctypes.ErrCorrupt) {
		t.Fatalf("put on a halted instance: %v, want %v", err, rpctypes.ErrCorrupt)
	}
	if _, err := c.Get(ctx, "k", clientv3.WithSerializable()); !errors.Is(err, rpctypes.ErrCorrupt) {
		t.Fatalf("get on a halted instance: %v, want %v", err, rpctypes.ErrCorrupt)
	}
	st, err := c.Status(ctx, s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	errs := strings.Join(st.Errors, "\n")
	if !strings.Contains(errs, rpctypes.ErrGRPCNoLeader.Error()) || !strings.Contains(errs, "ZooKeeper holds") {
		t.Fatalf("status errors %q: want no leader and what happened", st.Errors)
	}
}
