package auth

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// Eval evaluates one auth change against the current encoded auth state
// (as staged in the commit batch) and returns the next state (nil: nothing
// changes) and the response. The engine may call it again if another
// instance took the log position, so it must not keep state.
type Eval func(cur []byte) (next []byte, resp any, err error)

// Check checks a write against the encoded auth state it is about to be
// committed on and returns the error to answer instead, or nil.
type Check func(state []byte) error

type checkKey struct{}

// WithCheck returns a context whose writes run check inside their commit
// batch, right before their evaluation, on the auth state as staged there:
// a permission revoked by an entry committed before the write's is
// enforced, as etcd checks writes when it applies them.
func WithCheck(ctx context.Context, check Check) context.Context {
	return context.WithValue(ctx, checkKey{}, check)
}

// CheckFrom returns the check WithCheck attached to ctx, or nil.
func CheckFrom(ctx context.Context) Check {
	c, _ := ctx.Value(checkKey{}).(Check)
	return c
}

// Change returns the Eval of a changing request as it goes into the log
// (prepared by Store.Prepare), with entropy drawn once for the request:
// every evaluation of it, on any instance, computes the same change. The
// response is Apply's (its header left to the caller).
func Change(req proto.Message, entropy []byte) Eval {
	return func(cur []byte) ([]byte, any, error) {
		st, err := Decode(cur)
		if err != nil {
			return nil, nil, err
		}
		next, resp, err := st.Apply(req, entropy)
		if err != nil {
			return nil, nil, err
		}
		if next == st {
			return nil, resp, nil
		}
		return next.Encode(), resp, nil
	}
}

// Rotate returns the Eval that replaces the simple tokens' secret of an
// enabled auth state cur with entropy (at least 16 random bytes, drawn
// once): every token signed with the former secret is refused from the
// position the change is applied at, as after a disable and enable,
// while users, roles, the auth revision and JWTs stay as they are. A
// disabled state is left as it is (AuthEnable draws a new secret anyway).
// The response is nil.
func Rotate(entropy []byte) Eval {
	return func(cur []byte) ([]byte, any, error) {
		st, err := Decode(cur)
		if err != nil {
			return nil, nil, err
		}
		if !st.Enabled {
			return nil, nil, nil
		}
		if len(entropy) < 16 {
			return nil, nil, fmt.Errorf("auth: a secret rotation needs at least 16 bytes of entropy, got %d", len(entropy))
		}
		n := st.clone()
		n.secret = append([]byte(nil), entropy...)
		return n.Encode(), nil, nil
	}
}
