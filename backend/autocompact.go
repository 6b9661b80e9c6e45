package backend

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/compactor"
)

// errNotLeader refuses an auto-compaction on an instance that lost the
// leadership after the compactor checked it.
var errNotLeader = errors.New("not the leader instance")

// autoCompactTarget is the auto-compactor's view of the backend: the
// view's revision, the election shared with lease expiry and physical
// compaction, and Compact, the Compact RPC's path, fenced by the
// leadership so that a deposed leader's compaction is refused.
type autoCompactTarget struct{ b *Backend }

var _ compactor.Target = autoCompactTarget{}

func (t autoCompactTarget) Rev() int64 { return t.b.view.State().Rev }

func (t autoCompactTarget) Leader() bool {
	leader, _, _ := t.b.election.State()
	return leader
}

func (t autoCompactTarget) Compact(ctx context.Context, rev int64) error {
	leader, fence, _ := t.b.election.State()
	if !leader || !fence.Valid() {
		return errNotLeader
	}
	_, err := t.b.compact(ctx, &pb.CompactionRequest{Revision: rev}, fence)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrGRPCCompacted):
		return fmt.Errorf("compact to %d: %w", rev, compactor.ErrCompacted)
	case errors.Is(err, errRefused):
		return fmt.Errorf("compact to %d: leadership lost: %w", rev, err)
	}
	return fmt.Errorf("compact to %d: %w", rev, err)
}
