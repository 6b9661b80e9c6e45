package grpcsrv

import (
	"context"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/translate"
)

// KV is the engine's key-value side. Requests reach it validated (translate's
// checks, size included); it answers etcd's rpctypes errors or errors that
// toGRPCError maps.
type KV interface {
	// Linearize waits until the view holds every write acknowledged before
	// the call, by any instance.
	Linearize(ctx context.Context) error
	// Read runs fn on one consistent state of the view, without a barrier;
	// fn must not block. It is also the way to read the view for a
	// service of its own (a snapshot, a hash).
	Read(fn func(revision.Reader) error) error
	// Range serves a Range, after a barrier unless it is serializable.
	Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error)
	Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error)
	DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error)
	// Txn serves read-only transactions on the read path, the others
	// through the log.
	Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error)
	Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error)
}

type kvServer struct {
	pb.UnsafeKVServer
	be        KV
	hdr       header
	lg        *logrus.Entry
	maxTxnOps int
	// maxRequestBytes bounds write requests and sizes RangeStream chunks.
	maxRequestBytes int
}

var _ pb.KVServer = (*kvServer)(nil)

func (s *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := translate.CheckRange(r); err != nil {
		return nil, err
	}
	resp, err := s.be.Range(ctx, r)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	resp.Header = s.hdr.filled(resp.Header)
	return resp, nil
}

func (s *kvServer) RangeStream(r *pb.RangeRequest, stream pb.KV_RangeStreamServer) error {
	if err := translate.CheckRangeStream(r); err != nil {
		return err
	}
	ctx := stream.Context()
	if !r.Serializable {
		if err := s.be.Linearize(ctx); err != nil {
			return toGRPCError(s.lg, err)
		}
	}
	err := translate.RangeStream(ctx, r, s.maxRequestBytes, s.be.Read, func(resp *pb.RangeResponse) error {
		if resp.Header != nil {
			s.hdr.fillWithoutRevision(resp.Header)
		}
		return stream.Send(&pb.RangeStreamResponse{RangeResponse: resp})
	})
	return toGRPCError(s.lg, err)
}

func (s *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := translate.CheckPut(r); err != nil {
		return nil, err
	}
	if err := translate.CheckRequestSize(r, s.maxRequestBytes); err != nil {
		return nil, err
	}
	resp, err := s.be.Put(ctx, r)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	resp.Header = s.hdr.filled(resp.Header)
	return resp, nil
}

func (s *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := translate.CheckDelete(r); err != nil {
		return nil, err
	}
	if err := translate.CheckRequestSize(r, s.maxRequestBytes); err != nil {
		return nil, err
	}
	resp, err := s.be.DeleteRange(ctx, r)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	resp.Header = s.hdr.filled(resp.Header)
	return resp, nil
}

func (s *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := translate.CheckTxn(r, s.maxTxnOps); err != nil {
		return nil, err
	}
	if !translate.IsTxnReadonly(r) {
		if err := translate.CheckRequestSize(r, s.maxRequestBytes); err != nil {
			return nil, err
		}
	}
	resp, err := s.be.Txn(ctx, r)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	resp.Header = s.hdr.filled(resp.Header)
	return resp, nil
}

func (s *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	if err := translate.CheckRequestSize(r, s.maxRequestBytes); err != nil {
		return nil, err
	}
	resp, err := s.be.Compact(ctx, r)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	resp.Header = s.hdr.filled(resp.Header)
	return resp, nil
}
