package backend

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/revision"
	"github.com/zketcd/zketcd/translate"
	"github.com/zketcd/zketcd/zkstore"
)

func (b *Backend) syncHead() (int64, error) {
	read := b.store.QuorumHead
	if b.cfg.RelaxedReads {
		read = b.store.SyncHead
	}
	h, err := read()
	if err != nil {
		return 0, err
	}
	return h.LSN, nil
}

// Linearize waits until the view holds every write acknowledged (by any
// instance) before the call. Errors: ErrGRPCNoLeader when ZooKeeper cannot
// be reached, ctx's error, ErrGRPCCorrupt for a broken view.
func (b *Backend) Linearize(ctx context.Context) error {
	start := time.Now()
	defer func() { b.metrics.barrierWait.Observe(time.Since(start).Seconds()) }()
	lsn, err := b.barrier.wait(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return b.stopped(err)
	}
	if b.view.State().LSN >= lsn {
		return nil
	}
	b.kickTailer()
	if err := b.view.WaitApplied(ctx, lsn); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return rpctypes.ErrGRPCCorrupt
	}
	return nil
}

// Range serves a validated Range request, after a barrier unless it is
// serializable.
func (b *Backend) Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	if !req.Serializable {
		if err := b.Linearize(ctx); err != nil {
			return nil, err
		}
	}
	var resp *pb.RangeResponse
	err := b.view.Read(func(r revision.Reader) error {
		var err error
		resp, err = translate.Range(r, req)
		return err
	})
	return resp, err
}

// Read runs fn on a consistent state of the view, without a barrier (call
// Linearize first for a linearizable read). The view's read lock is held
// while fn runs: fn must not block.
func (b *Backend) Read(fn func(revision.Reader) error) error { return b.view.Read(fn) }

// Put commits a validated Put.
func (b *Backend) Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error) {
	return write(ctx, b, req, func(bt *revision.Batch) (*pb.PutResponse, error) { return translate.Put(bt, req) })
}

// DeleteRange commits a validated DeleteRange.
func (b *Backend) DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return write(ctx, b, req, func(bt *revision.Batch) (*pb.DeleteRangeResponse, error) { return translate.DeleteRange(bt, req) })
}

// Txn serves a validated Txn: read-only ones on the read path, the others
// through the committer.
func (b *Backend) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	if translate.IsTxnReadonly(req) {
		if !translate.IsTxnSerializable(req) {
			if err := b.Linearize(ctx); err != nil {
				return nil, err
			}
		}
		var resp *pb.TxnResponse
		err := b.view.Read(func(r revision.Reader) error {
			var err error
			resp, err = translate.Txn(revision.NewBatch(r), req)
			return err
		})
		return resp, err
	}
	return write(ctx, b, req, func(bt *revision.Batch) (*pb.TxnResponse, error) { return translate.Txn(bt, req) })
}

// Compact commits a compaction to req.Revision: reads below it fail from
// then on, on every instance. Errors: ErrGRPCCompacted if already compacted
// there, ErrGRPCFutureRev above the current revision.
func (b *Backend) Compact(ctx context.Context, req *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return b.compact(ctx, req, zkstore.Fence{})
}

// compact is Compact; with a valid fence, the compaction is committed only
// while that leadership holds (errRefused otherwise).
func (b *Backend) compact(ctx context.Context, req *pb.CompactionRequest, fence zkstore.Fence) (*pb.CompactionResponse, error) {
	if req.Revision > b.view.State().Rev {
		// It may exist on another instance: decide after a barrier.
		if err := b.Linearize(ctx); err != nil {
			return nil, err
		}
	}
	eval := func(bt *revision.Batch) (*pb.CompactionResponse, error) { return translate.Compact(bt, req) }
	var guards func() []zkstore.Guard
	if fence.Valid() {
		guards = func() []zkstore.Guard { return []zkstore.Guard{fence.Guard()} }
	}
	resp, err := writeGuarded(ctx, b, req, eval, guards)
	if err != nil {
		return nil, err
	}
	if req.Physical {
		if err := b.waitPhysical(ctx, req.Revision); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// write queues a validated request (its size checked by the caller) for
// the committer and returns its typed response.
func write[T any](ctx context.Context, b *Backend, req proto.Message, eval func(*revision.Batch) (T, error)) (T, error) {
	return writeGuarded(ctx, b, req, eval, nil)
}

// writeGuarded is write; with guards not nil, the request is committed in
// an entry of its own under the preconditions guards returns.
func writeGuarded[T any](ctx context.Context, b *Backend, req proto.Message, eval func(*revision.Batch) (T, error), guards func() []zkstore.Guard) (T, error) {
	return propose(ctx, b, proto.Size(req), eval, guards)
}
