package grpcsrv

import (
	"context"
	"errors"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/api/v3/version"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/etcdformat"
	"github.com/zketcd/zketcd/revision"
)

// Maintenance is what the Maintenance service reads from the engine.
type Maintenance interface {
	Health
	Identity
	// HeadLSN is the newest log position seen (State().LSN is the applied one).
	HeadLSN() int64
	// DBSize is the bytes of log data this instance has read or written.
	DBSize() int64
	// Leader reports whether this instance is the leader instance and the
	// member ID of the current one (0 if unknown).
	Leader() (self bool, id uint64)
	// Snapshot is a consistent copy of the whole view (every retained
	// version of every key, the leases) at one applied position.
	Snapshot() *revision.Snapshot
	// State is the view's applied position.
	State() revision.State
	// Linearize waits until the view holds every write acknowledged before
	// the call, by any instance (a snapshot is taken after it).
	Linearize(ctx context.Context) error
	// OnCompact registers f to run, under the view's write lock, with the
	// state before each compaction the view applies (etcd keeps the hash
	// of the key space at each compaction); f must not block.
	OnCompact(f func(before *revision.Snapshot, rev int64))
}

// halted is implemented by the Health error of an instance that stopped
// serving for good (ZooKeeper's data went back under it, or holds a newer
// format); Status reports that error's text beside "no leader".
type halted interface{ Halted() bool }

// quotaBytes is reported as DbSizeQuota (etcd's default quota).
const quotaBytes = 2 << 30

type maintenanceServer struct {
	pb.UnsafeMaintenanceServer
	be     Maintenance
	hdr    header
	lg     *logrus.Entry
	hashes *etcdformat.HashStore // compaction hashes (hashkv.go)
}

var _ pb.MaintenanceServer = (*maintenanceServer)(nil)

// Status reports the instance in etcd's terms: Version is the etcd API
// version zketcd implements; RaftIndex and RaftAppliedIndex are log
// positions (entries); RaftTerm is the ZooKeeper epoch of the newest commit;
// Leader is the elected leader instance (which expires leases and compacts)
// while this instance has a live, caught-up session, else 0 with etcd's
// "no leader" error.
func (s *maintenanceServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	hdr := &pb.ResponseHeader{}
	s.hdr.fill(hdr)
	st := s.be.State()
	headLSN := s.be.HeadLSN()
	resp := &pb.StatusResponse{
		Header:           hdr,
		Version:          version.Version,
		RaftIndex:        uint64(max(headLSN, st.LSN)),
		RaftAppliedIndex: uint64(st.LSN),
		RaftTerm:         s.be.Term(),
		DbSize:           statusDBSize(s.be.DBSize()),
		DbSizeInUse:      statusDBSize(s.be.DBSize()),
		DbSizeQuota:      quotaBytes,
		StorageVersion:   version.Version[:3] + ".0",
		DowngradeInfo:    &pb.DowngradeInfo{},
	}
	if err := s.be.Health(); err != nil {
		resp.Errors = append(resp.Errors, rpctypes.ErrGRPCNoLeader.Error())
		var h halted
		if errors.As(err, &h) && h.Halted() {
			resp.Errors = append(resp.Errors, err.Error()) // what happened, what to do
		}
	} else if _, leader := s.be.Leader(); leader != 0 {
		resp.Leader = leader
	} else {
		resp.Leader = s.be.MemberID()
	}
	return resp, nil
}

// statusDBSize is the DbSize (and DbSizeInUse) Status reports for applied
// bytes of log entries. It is never 0: a fresh root has applied no entry yet,
// and etcdctl's `endpoint status` table divides by DbSize (etcdctl 3.7.3
// panics with an integer divide by zero on a 0), while etcd's own database
// file is never empty either.
func statusDBSize(applied int64) int64 { return max(applied, 1) }

// Alarm reports no alarms (zketcd raises none yet) and refuses to set one.
func (s *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	hdr := &pb.ResponseHeader{}
	s.hdr.fill(hdr)
	if r.Action == pb.AlarmRequest_ACTIVATE {
		return nil, status.Error(codes.Unimplemented, "zketcd: alarms cannot be raised by clients")
	}
	return &pb.AlarmResponse{Header: hdr}, nil
}

// Defragment succeeds without doing anything: ZooKeeper manages its own
// files (snapshots and logs, purged by its autopurge settings).
func (s *maintenanceServer) Defragment(ctx context.Context, _ *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	hdr := &pb.ResponseHeader{}
	s.hdr.fill(hdr)
	return &pb.DefragmentResponse{Header: hdr}, nil
}

func (s *maintenanceServer) MoveLeader(context.Context, *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	return nil, status.Error(codes.Unimplemented, "zketcd: MoveLeader is not supported (ZooKeeper elects its own leader)")
}

func (s *maintenanceServer) Downgrade(context.Context, *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return nil, status.Error(codes.Unimplemented, "zketcd: Downgrade is not supported")
}
