package grpcsrv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

type testUnavailable struct{}

func (testUnavailable) Error() string     { return "down" }
func (testUnavailable) Unavailable() bool { return true }

// etcdErrors are the messages of etcd's gRPC errors (rpctypes): all a
// client may ever read from zketcd.
var etcdErrors = func() map[string]bool {
	m := map[string]bool{}
	for _, e := range []error{
		rpctypes.ErrGRPCNoLeader, rpctypes.ErrGRPCCanceled, rpctypes.ErrGRPCDeadlineExceeded,
		rpctypes.ErrGRPCCompacted, rpctypes.ErrGRPCFutureRev, rpctypes.ErrGRPCLeaseNotFound,
		rpctypes.ErrGRPCCorrupt, rpctypes.ErrGRPCTimeout, rpctypes.ErrGRPCTimeoutDueToConnectionLost,
		rpctypes.ErrGRPCRequestTooLarge, rpctypes.ErrGRPCNoSpace, rpctypes.ErrGRPCPermissionDenied,
	} {
		m[status.Convert(e).Message()] = true
	}
	return m
}()

// TestErrorsMapToEtcds: every error class the layers below return — the
// engine's, zkstore's (wrapped or as go-zookeeper returns them), the
// view's, the auth store's, translate's and the engine's rpctypes errors,
// contexts — reaches clients as one of etcd's gRPC errors, the classes
// etcd has as etcd's and every other one as "no leader" (logged), so no
// ZooKeeper or internal text reaches a client.
func TestErrorsMapToEtcds(t *testing.T) {
	lg := logrus.New()
	lg.SetOutput(io.Discard)
	noLeader := rpctypes.ErrGRPCNoLeader
	for _, c := range []struct {
		name string
		in   error
		want error
	}{
		// etcd's own errors, as translate and the engine return them.
		{"an rpctypes error", rpctypes.ErrGRPCLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
		{"the engine's corrupt (a halted instance)", rpctypes.ErrGRPCCorrupt, rpctypes.ErrGRPCCorrupt},
		{"the engine's unknown outcome", rpctypes.ErrGRPCTimeoutDueToConnectionLost, rpctypes.ErrGRPCTimeoutDueToConnectionLost},
		{"a too large request", rpctypes.ErrGRPCRequestTooLarge, rpctypes.ErrGRPCRequestTooLarge},
		{"no space", rpctypes.ErrGRPCNoSpace, rpctypes.ErrGRPCNoSpace},
		{"permission denied", rpctypes.ErrGRPCPermissionDenied, rpctypes.ErrGRPCPermissionDenied},
		// Contexts and the view.
		{"canceled, wrapped", fmt.Errorf("read: %w", context.Canceled), rpctypes.ErrGRPCCanceled},
		{"deadline", context.DeadlineExceeded, rpctypes.ErrGRPCDeadlineExceeded},
		{"compacted, wrapped", fmt.Errorf("range: %w", revision.ErrCompacted), rpctypes.ErrGRPCCompacted},
		{"future revision", revision.ErrFutureRev, rpctypes.ErrGRPCFutureRev},
		{"a batch boundary", revision.ErrBatchBoundary, noLeader},
		// The log unavailable, however it says so.
		{"unavailable (a marker)", fmt.Errorf("commit: %w", testUnavailable{}), noLeader},
		{"zkstore unavailable", fmt.Errorf("read head: %w: zk: connection closed", zkstore.ErrUnavailable), noLeader},
		// Everything else: no leader, never its text.
		{"entry missing", fmt.Errorf("%w: /zketcd/log/0/1", zkstore.ErrEntryMissing), noLeader},
		{"entry too large", zkstore.ErrEntryTooLarge, noLeader},
		{"unknown outcome, unconverted", fmt.Errorf("entry 7: %w", zkstore.ErrUnknownOutcome), noLeader},
		{"base changed", zkstore.ErrBaseChanged, noLeader},
		{"no root", zkstore.ErrNoRoot, noLeader},
		{"read lease held", zkstore.ErrLeaseHeld, noLeader},
		{"corrupt entry", fmt.Errorf("znode /zketcd/log/0/9: %w", zkstore.ErrCorruptEntry), noLeader},
		{"newer format", &zkstore.FormatError{What: "log entry", Got: 3, Known: 2}, noLeader},
		{"not fresh", zkstore.ErrNotFresh, noLeader},
		{"go-zookeeper's no node", zk.ErrNoNode, noLeader},
		{"go-zookeeper's session expired", zk.ErrSessionExpired, noLeader},
		{"go-zookeeper's bad version, wrapped", fmt.Errorf("make base current: %w", zk.ErrBadVersion), noLeader},
		{"not the leader", engine.ErrNotLeader, noLeader},
		{"auth changed", engine.ErrAuthChanged, noLeader},
		{"not sent", engine.ErrNotSent, noLeader},
		{"unsupported", engine.ErrUnsupported, noLeader},
		{"halted", fmt.Errorf("%w: %w", engine.ErrHalted, engine.ErrRollback), noLeader},
		{"a rollback", &engine.RollbackError{Refused: true}, noLeader},
		{"corrupt auth state", auth.ErrCorruptState, noLeader},
		{"anything", errors.New("zk: something odd"), noLeader},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := toGRPCError(logrus.NewEntry(lg), c.in)
			if !errors.Is(got, c.want) {
				t.Fatalf("%v: got %v, want %v", c.in, got, c.want)
			}
			s, ok := status.FromError(got)
			if !ok || !etcdErrors[s.Message()] {
				t.Fatalf("%v became %v: not one of etcd's errors", c.in, got)
			}
			if low := strings.ToLower(s.Message()); strings.Contains(low, "zk") || strings.Contains(low, "zookeeper") || strings.Contains(low, "znode") {
				t.Fatalf("%v reaches the client as %q", c.in, s.Message())
			}
		})
	}
	if toGRPCError(logrus.NewEntry(lg), nil) != nil {
		t.Fatal("nil became an error")
	}
}
