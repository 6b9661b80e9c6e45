package backend

import (
	"context"
	"errors"
	"math"
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
	if err := b.servable(); err != nil {
		return err
	}
	start := time.Now()
	defer func() { b.metrics.barrierWait.Observe(time.Since(start).Seconds()) }()
	lsn, err := b.barrier.wait(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return toUnavailable(err)
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
	if err := b.servable(); err != nil {
		return nil, err
	}
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

// initialStreamChunk is the first chunk's limit of a RangeStream; later
// chunks double or halve toward MaxRequestBytes, as etcd sizes them.
const initialStreamChunk = 10

// RangeStream serves a validated RangeStream request in chunks through
// send. The read revision is fixed at the first chunk; the last chunk
// carries the header revision, More and Count, as etcd 3.7 does.
func (b *Backend) RangeStream(ctx context.Context, req *pb.RangeRequest, send func(*pb.RangeResponse) error) error {
	if err := b.servable(); err != nil {
		return err
	}
	if !req.Serializable {
		if err := b.Linearize(ctx); err != nil {
			return err
		}
	}
	r := proto.Clone(req).(*pb.RangeRequest)
	if r.CountOnly {
		resp, err := b.readRange(r, false)
		if err != nil {
			return err
		}
		return send(&pb.RangeResponse{Header: &pb.ResponseHeader{Revision: resp.Header.Revision}, Count: resp.Count})
	}
	total := r.Limit
	if total == 0 {
		total = math.MaxInt64
	}
	r.Limit = min(int64(initialStreamChunk), total)
	var count, headerRev int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		resp, err := b.readRange(r, false)
		if err != nil {
			return err
		}
		if headerRev == 0 {
			headerRev = resp.Header.Revision
			if r.Revision == 0 {
				r.Revision = headerRev
			}
		}
		count += int64(len(resp.Kvs))
		var next []byte
		if resp.More {
			last := resp.Kvs[len(resp.Kvs)-1].Key
			next = append(append(make([]byte, 0, len(last)+1), last...), 0)
		}
		out := &pb.RangeResponse{Kvs: resp.Kvs}
		done := !resp.More || count == total
		if done {
			out.Header = &pb.ResponseHeader{Revision: headerRev}
			out.More = resp.More
			out.Count = count
			if resp.More {
				var rest int64
				err := b.view.Read(func(rd revision.Reader) error {
					var err error
					rest, err = translate.Count(rd, next, r.RangeEnd, r.Revision)
					return err
				})
				if err != nil {
					return err
				}
				out.Count += rest
			}
		}
		if err := send(out); err != nil {
			return err
		}
		if done {
			return nil
		}
		r.Key = next
		size := proto.Size(resp)
		switch {
		case size < b.cfg.MaxRequestBytes/2:
			r.Limit *= 2
		case size > b.cfg.MaxRequestBytes*2:
			r.Limit /= 2
		}
		r.Limit = max(1, min(r.Limit, total-count))
	}
}

func (b *Backend) readRange(r *pb.RangeRequest, withCount bool) (*pb.RangeResponse, error) {
	var resp *pb.RangeResponse
	err := b.view.Read(func(rd revision.Reader) error {
		var err error
		if withCount {
			resp, err = translate.Range(rd, r)
		} else {
			resp, err = translate.RangeChunk(rd, r)
		}
		return err
	})
	return resp, err
}

// Put commits a validated Put.
func (b *Backend) Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error) {
	resp, err := b.write(ctx, req, func(bt *revision.Batch) (any, error) { return translate.Put(bt, req) })
	if err != nil {
		return nil, err
	}
	return resp.(*pb.PutResponse), nil
}

// DeleteRange commits a validated DeleteRange.
func (b *Backend) DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp, err := b.write(ctx, req, func(bt *revision.Batch) (any, error) { return translate.DeleteRange(bt, req) })
	if err != nil {
		return nil, err
	}
	return resp.(*pb.DeleteRangeResponse), nil
}

// Txn serves a validated Txn: read-only ones on the read path, the others
// through the committer.
func (b *Backend) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := b.servable(); err != nil {
		return nil, err
	}
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
	resp, err := b.write(ctx, req, func(bt *revision.Batch) (any, error) { return translate.Txn(bt, req) })
	if err != nil {
		return nil, err
	}
	return resp.(*pb.TxnResponse), nil
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
	eval := func(bt *revision.Batch) (any, error) {
		if err := translate.CheckCompact(bt, req.Revision); err != nil {
			return nil, err
		}
		bt.Compact(req.Revision)
		return &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: bt.Rev()}}, nil
	}
	var resp any
	var err error
	if fence.Valid() {
		resp, err = b.writeGuarded(ctx, req, eval, func() []zkstore.Guard { return []zkstore.Guard{fence.Guard()} })
	} else {
		resp, err = b.write(ctx, req, eval)
	}
	if err != nil {
		return nil, err
	}
	if req.Physical {
		if err := b.waitPhysical(ctx, req.Revision); err != nil {
			return nil, err
		}
	}
	return resp.(*pb.CompactionResponse), nil
}

// write checks the request size and queues it for the committer.
func (b *Backend) write(ctx context.Context, req proto.Message, eval evalFunc) (any, error) {
	return b.writeGuarded(ctx, req, eval, nil)
}

// writeGuarded is write; with guards not nil, the request is committed in
// an entry of its own under the preconditions guards returns.
func (b *Backend) writeGuarded(ctx context.Context, req proto.Message, eval evalFunc, guards func() []zkstore.Guard) (any, error) {
	if err := b.servable(); err != nil {
		return nil, err
	}
	size := proto.Size(req)
	if size > b.cfg.MaxRequestBytes {
		return nil, rpctypes.ErrGRPCRequestTooLarge
	}
	resp, err := b.submit(ctx, &proposal{ctx: ctx, size: size, eval: eval, guards: guards, done: make(chan struct{})})
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return nil, err
	}
	return resp, err
}
