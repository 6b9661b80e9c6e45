package grpcsrv

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/revision"
)

// Identity is what every response header carries: who answers, in which
// term, at which revision.
type Identity interface {
	// ClusterID and MemberID identify the cluster and this instance.
	ClusterID() uint64
	MemberID() uint64
	// Term is etcd's raft term (zketcd: the ZooKeeper epoch of the newest
	// commit seen).
	Term() uint64
	// State is the view's applied position; its Rev is the header revision.
	State() revision.State
}

// header fills response headers with the cluster and member identity.
type header struct {
	be Identity
}

// filled is rh filled (fill), or a new filled header if rh is nil: a
// response from below without one (never from this build's engine) is
// answered with this instance's header rather than a panic.
func (h header) filled(rh *pb.ResponseHeader) *pb.ResponseHeader {
	if rh == nil {
		rh = &pb.ResponseHeader{}
	}
	h.fill(rh)
	return rh
}

// fill sets the identity fields and, if unset, the current revision.
func (h header) fill(rh *pb.ResponseHeader) {
	h.fillWithoutRevision(rh)
	if rh.Revision == 0 {
		rh.Revision = h.be.State().Rev
	}
}

// fillWithoutRevision sets the identity fields only (streams set their own
// pinned revision).
func (h header) fillWithoutRevision(rh *pb.ResponseHeader) {
	rh.ClusterId = h.be.ClusterID()
	rh.MemberId = h.be.MemberID()
	rh.RaftTerm = h.be.Term()
}
