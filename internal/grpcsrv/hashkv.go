package grpcsrv

import (
	"context"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/internal/etcdformat"
)

// newMaintenanceServer returns the Maintenance service of be; it keeps the
// hashes of the compactions be's view applies from now on.
func newMaintenanceServer(be Maintenance, hdr header, lg *logrus.Entry) *maintenanceServer {
	s := &maintenanceServer{be: be, hdr: hdr, lg: lg, hashes: &etcdformat.HashStore{}}
	be.OnCompact(s.hashes.Compacted)
	return s
}

// HashKV answers with etcd's hash of the key space up to r.Revision (0: the
// current revision), computed from this instance's view exactly as etcd
// 3.7.3 computes it over its key bucket (see etcdformat.HashKV), so that
// `etcdctl endpoint hashkv` compares zketcd instances with each other and
// with etcd. Like etcd it reads the local state without a quorum round trip.
// The header revision is the current revision. Errors: ErrGRPCCompacted,
// ErrGRPCFutureRev.
//
// Like etcd, it answers a request for the revision of one of the last ten
// compactions this instance applied (since it started) with the hash
// computed while compacting (etcdformat.CompactionHash), whose
// compact_revision is the compaction before; a compaction applied while the
// previous one's hash was still being computed has none, as in etcd
// (etcdformat.HashStore), and is answered from the current state.
func (s *maintenanceServer) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	h, stored, err := s.hashes.Lookup(ctx, r.Revision)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	cur := s.be.State().Rev
	if !stored {
		snap := s.be.Snapshot()
		if h, err = etcdformat.HashKV(snap, r.Revision); err != nil {
			return nil, toGRPCError(s.lg, err)
		}
		cur = snap.State.Rev
	}
	resp := &pb.HashKVResponse{
		Header:          &pb.ResponseHeader{Revision: cur},
		Hash:            h.Hash,
		CompactRevision: h.CompactRevision,
		HashRevision:    h.Revision,
	}
	resp.Header = s.hdr.filled(resp.Header)
	return resp, nil
}

// Hash stays unimplemented: etcd hashes its whole bbolt file (members,
// cluster version and alarms included), state zketcd keeps elsewhere or not
// at all, so no value zketcd could return would be comparable with etcd's.
// HashKV is the comparable hash.
func (s *maintenanceServer) Hash(context.Context, *pb.HashRequest) (*pb.HashResponse, error) {
	return nil, status.Error(codes.Unimplemented, "zketcd: Hash is not supported (there is no bbolt file to hash); use HashKV")
}
