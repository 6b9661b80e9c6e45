package translate

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/revision"
)

// CheckCompact validates a compaction to rev against r (the state it will be
// staged on), with etcd's errors: ErrGRPCCompacted at or below the
// compacted revision, ErrGRPCFutureRev above the current one.
func CheckCompact(r revision.Reader, rev int64) error {
	switch {
	case rev <= r.CompactRev():
		return rpctypes.ErrGRPCCompacted
	case rev > r.Rev():
		return rpctypes.ErrGRPCFutureRev
	}
	return nil
}

// Compact stages a compaction to r.Revision in bt (after CheckCompact).
// The response's revision is bt's: a compaction takes none of its own.
func Compact(bt *revision.Batch, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	if err := CheckCompact(bt, r.Revision); err != nil {
		return nil, err
	}
	bt.Compact(r.Revision)
	return &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: bt.Rev()}}, nil
}
