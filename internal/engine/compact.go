package engine

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/compactor"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Compact commits a compaction to req.Revision: reads below it fail from
// then on, on every instance. Errors: ErrGRPCCompacted if already compacted
// there, ErrGRPCFutureRev above the current revision.
func (b *Engine) Compact(ctx context.Context, req *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return b.compact(ctx, req, zkstore.Fence{})
}

// compact is Compact; with a valid fence, the compaction is committed only
// while that leadership holds (errRefused otherwise).
func (b *Engine) compact(ctx context.Context, req *pb.CompactionRequest, fence zkstore.Fence) (*pb.CompactionResponse, error) {
	if err := b.compactBarrier(ctx, req); err != nil {
		return nil, err
	}
	var resp *pb.CompactionResponse
	var err error
	if fence.Valid() {
		resp, err = writeGuarded(ctx, b.commit, req, compactKind.eval(b, req, nil),
			func() []zkstore.Guard { return []zkstore.Guard{fence.Guard()} })
	} else {
		resp, err = compactKind.write(ctx, b, req, nil)
	}
	if err != nil {
		return nil, err
	}
	if req.Physical {
		if err := b.compaction.waitPhysical(ctx, req.Revision); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// autoCompactTarget is the auto-compactor's view of the engine: the
// view's revision, the election shared with lease expiry and physical
// compaction, and Compact, the Compact RPC's path, fenced by the
// leadership so that a deposed leader's compaction is refused.
type autoCompactTarget struct{ b *Engine }

func (t autoCompactTarget) Rev() int64 { return t.b.view.State().Rev }

func (t autoCompactTarget) Leader() bool {
	leader, _, _ := t.b.election.State()
	return leader
}

func (t autoCompactTarget) Compact(ctx context.Context, rev int64) error {
	leader, fence, _ := t.b.election.State()
	if !leader || !fence.Valid() {
		return ErrNotLeader // lost since the compactor checked
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
