package engine

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/translate"
)

// Range serves a validated Range request, after a barrier unless it is
// serializable.
func (b *Engine) Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := b.servable(); err != nil {
		return nil, err
	}
	if !req.Serializable {
		if err := b.Linearize(ctx); err != nil {
			return nil, err
		}
	}
	var resp *pb.RangeResponse
	var rev int64
	err := b.view.Read(func(r revision.Reader) error {
		var err error
		rev = req.Revision
		if rev <= 0 {
			rev = r.Rev()
		}
		if n, ok := b.pages.lookup(req); ok {
			resp, err = translate.RangeCounted(r, req, n)
		} else {
			resp, err = translate.Range(r, req)
		}
		return err
	})
	if err == nil {
		b.pages.record(req, resp, rev)
	}
	return resp, err
}

// Read runs fn on a consistent state of the view, without a barrier (call
// Linearize first for a linearizable read). The view's read lock is held
// while fn runs: fn must not block. A halted instance runs no fn and
// answers etcd's corrupt-cluster error (serializable reads included: its
// view holds a history that is no longer the cluster's).
func (b *Engine) Read(fn func(revision.Reader) error) error {
	if err := b.servable(); err != nil {
		return err
	}
	return b.view.Read(fn)
}

// Put commits a validated Put.
func (b *Engine) Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error) {
	if err := b.checkQuota(req); err != nil {
		return nil, err
	}
	return putKind.write(ctx, b, req, nil)
}

// DeleteRange commits a validated DeleteRange.
func (b *Engine) DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return deleteRangeKind.write(ctx, b, req, nil)
}

// Txn serves a validated Txn: read-only ones on the read path, the others
// through the committer.
func (b *Engine) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
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
	if err := b.checkQuota(req); err != nil {
		return nil, err
	}
	return txnKind.write(ctx, b, req, nil)
}
