package grpcsrv

import (
	"context"
	"errors"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/revision"
)

// toGRPCError maps any error from the layers below to what etcd would send:
// gRPC status errors pass through, context errors become Canceled or
// DeadlineExceeded, the view's read errors their rpctypes forms; anything
// else is logged and reported as etcd's "no leader" (Unavailable), so a
// ZooKeeper error string never reaches a client.
func toGRPCError(lg *logrus.Entry, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return rpctypes.ErrGRPCCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return rpctypes.ErrGRPCDeadlineExceeded
	case errors.Is(err, revision.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, revision.ErrFutureRev):
		return rpctypes.ErrGRPCFutureRev
	}
	lg.WithError(err).Warn("request failed")
	return rpctypes.ErrGRPCNoLeader
}
