package grpcsrv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/revision"
)

type testUnavailable struct{}

func (testUnavailable) Error() string     { return "down" }
func (testUnavailable) Unavailable() bool { return true }

// TestErrorsMapToEtcds: every error class the layers below return reaches
// clients as etcd's error, wrapped or not; unknown errors as "no leader".
func TestErrorsMapToEtcds(t *testing.T) {
	lg := logrus.New()
	lg.SetOutput(io.Discard)
	for _, c := range []struct {
		in   error
		want error
	}{
		{rpctypes.ErrGRPCLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
		{fmt.Errorf("read: %w", context.Canceled), rpctypes.ErrGRPCCanceled},
		{context.DeadlineExceeded, rpctypes.ErrGRPCDeadlineExceeded},
		{fmt.Errorf("range: %w", revision.ErrCompacted), rpctypes.ErrGRPCCompacted},
		{revision.ErrFutureRev, rpctypes.ErrGRPCFutureRev},
		{fmt.Errorf("commit: %w", testUnavailable{}), rpctypes.ErrGRPCNoLeader},
		{errors.New("zk: something odd"), rpctypes.ErrGRPCNoLeader},
	} {
		if got := toGRPCError(logrus.NewEntry(lg), c.in); !errors.Is(got, c.want) {
			t.Errorf("%v: got %v, want %v", c.in, got, c.want)
		}
	}
}
