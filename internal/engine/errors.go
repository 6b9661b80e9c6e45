package engine

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Errors of the forwarding protocol. None of them means anything was
// written.
var (
	// ErrNotLeader answers a request that needs the leadership (a
	// forwarded write, an auto-compaction, a corruption check) at an
	// instance that does not hold it: the engine's one "not leader".
	ErrNotLeader = errors.New("zketcd: this instance is not the leader")
	// ErrAuthChanged answers a forwarded write whose origin checked its
	// permissions on another auth state than the leader's.
	ErrAuthChanged = errors.New("zketcd: the auth state changed since the request was checked")
	// ErrNotSent is a Forwarder's answer when the request was not sent (no
	// connection to the peer could be made).
	ErrNotSent = errors.New("zketcd: the request was not sent to the leader")
	// ErrUnsupported is a Forwarder's answer when the peer does not know
	// the request (an older version): nothing ran there.
	ErrUnsupported = errors.New("zketcd: the peer does not serve this request")
)

// FinalError is a forwarded request's failure as the leader answered it.
type FinalError struct{ Err error }

func (e *FinalError) Error() string { return e.Err.Error() }
func (e *FinalError) Unwrap() error { return e.Err }

// errRefused answers a guarded proposal whose preconditions did not hold.
var errRefused = errors.New("commit refused: a precondition no longer holds")

// errLeaseHeld answers a commit refused because a leader holds the read
// lease (nothing was written; readlease.go).
var errLeaseHeld = errors.New("zketcd: the leader instance holds the read lease; only it commits")

// stopped answers etcd's "server stopped" for an error caused by the
// engine's own context ending (Close); other errors go to the caller
// unchanged, for grpcsrv's error mapper.
func stopped(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return rpctypes.ErrGRPCStopped
	}
	return err
}
