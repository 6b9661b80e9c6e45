package grpcsrv

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/backend"
)

// header fills response headers with the cluster and member identity.
type header struct {
	be *backend.Backend
}

// fill sets the identity fields and, if unset, the current revision.
func (h header) fill(rh *pb.ResponseHeader) {
	h.fillWithoutRevision(rh)
	if rh.Revision == 0 {
		rh.Revision = h.be.View().State().Rev
	}
}

// fillWithoutRevision sets the identity fields only (streams set their own
// pinned revision).
func (h header) fillWithoutRevision(rh *pb.ResponseHeader) {
	rh.ClusterId = h.be.ClusterID()
	rh.MemberId = h.be.MemberID()
	rh.RaftTerm = uint64(h.be.Head().Zxid >> 32)
}
