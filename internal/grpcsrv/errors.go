package grpcsrv

import (
	"errors"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/translate"
)

// unavailable is implemented by errors that mark a temporary unavailability
// of the log (zkstore.ErrUnavailable and what wraps it).
type unavailable interface{ Unavailable() bool }

// toGRPCError is zketcd's one mapping of errors to what etcd would send:
// gRPC status errors (etcd's rpctypes, which translate and the engine
// return) pass through; context errors become Canceled or DeadlineExceeded;
// the view's read errors their rpctypes forms; an unavailable log etcd's
// "no leader" (Unavailable); anything else is logged and reported as "no
// leader" too, so a ZooKeeper error string never reaches a client.
func toGRPCError(lg *logrus.Entry, err error) error {
	if err == nil {
		return nil
	}
	if s, ok := translate.Status(err); ok {
		return s
	}
	if u := unavailable(nil); errors.As(err, &u) && u.Unavailable() {
		lg.WithError(err).Debug("request failed: log unavailable")
		return rpctypes.ErrGRPCNoLeader
	}
	lg.WithError(err).Warn("request failed")
	return rpctypes.ErrGRPCNoLeader
}
