package engine

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/revision"
)

// AuthState returns the encoded auth state of the view (package auth's
// encoding; nil on a root whose auth store never changed) and the log
// position it was read at. Safe for concurrent use.
func (b *Engine) AuthState() ([]byte, int64) { return b.view.AuthState() }

// AuthWrite commits an auth change as an OpAuth op of the log, in log
// order with every other write, so that every instance applies it at the
// same position. It does not take an etcd revision. req is the request as
// it goes into the log (prepared by auth.Store.Prepare; its size is checked
// against --max-request-bytes) and entropy the random bytes drawn once for
// it. When forwarding writes, a follower sends both to the leader, which
// evaluates the change as this instance would (auth.Change). It returns
// auth.State.Apply's response; when AuthWrite returns without error the
// change is applied to this instance's view.
func (b *Engine) AuthWrite(ctx context.Context, req proto.Message, entropy []byte) (proto.Message, error) {
	k, ok := kindOf(req)
	if !ok || k.label() != authLabel {
		return nil, fmt.Errorf("zketcd: %T is not an auth change", req)
	}
	return k.writeAny(ctx, b, req, entropy)
}

// LeaseKeys returns the keys attached to lease id in the view, sorted, and
// whether the lease exists (for permission checks). Safe for concurrent use.
func (b *Engine) LeaseKeys(id int64) (keys [][]byte, ok bool) {
	_ = b.view.Read(func(r revision.Reader) error {
		if l := r.Lease(id); l != nil {
			keys, ok = l.Keys(), true
		}
		return nil
	})
	return keys, ok
}

// LeaseIDs returns the IDs of every lease in the view, ascending.
func (b *Engine) LeaseIDs() []int64 { return b.view.LeaseIDs() }
