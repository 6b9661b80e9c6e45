package translate

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/internal/revision"
)

// Status maps err to the gRPC error etcd sends for it where etcd has one:
// gRPC status errors (etcd's rpctypes, which this package and the engine
// return) pass through, context errors become Canceled or
// DeadlineExceeded, the view's read errors their rpctypes forms. ok is
// false for any other error: the caller decides (the client API answers
// "no leader", the internal endpoint "outcome unknown").
func Status(err error) (_ error, ok bool) {
	if _, isStatus := status.FromError(err); isStatus {
		return err, true
	}
	switch {
	case errors.Is(err, context.Canceled):
		return rpctypes.ErrGRPCCanceled, true
	case errors.Is(err, context.DeadlineExceeded):
		return rpctypes.ErrGRPCDeadlineExceeded, true
	case errors.Is(err, revision.ErrCompacted):
		return rpctypes.ErrGRPCCompacted, true
	case errors.Is(err, revision.ErrFutureRev):
		return rpctypes.ErrGRPCFutureRev, true
	}
	return err, false
}
