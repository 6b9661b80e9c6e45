package grpcsrv

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/api/v3/version"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/internal/etcdformat"
	"github.com/zketcd/zketcd/internal/revision"
)

// Maintenance is what the Maintenance service reads from the engine.
type Maintenance interface {
	Health
	Identity
	// HeadLSN is the newest log position seen (State().LSN is the applied one).
	HeadLSN() int64
	// DBSize is the bytes the root holds in ZooKeeper (etcd's DB size,
	// what the quota is checked against); DBSizeInUse the part a
	// defragment keeps; QuotaBytes the quota (negative: none).
	DBSize() int64
	DBSizeInUse() int64
	QuotaBytes() int64
	// Alarm serves etcd's AlarmRequest through the log (GET after a
	// barrier) and returns the response's alarms; Alarms lists the active
	// alarms of the view without a barrier.
	Alarm(ctx context.Context, req *pb.AlarmRequest) ([]*pb.AlarmMember, error)
	Alarms() []*pb.AlarmMember
	// Warnings lists conditions Status reports in Errors after the alarms
	// (etcd's StatusResponse has no other place for them), what the
	// operator must fix that does not stop the instance from serving: a
	// setting this instance refuses to act on, with the values that made it
	// refuse; a world-readable ZooKeeper root.
	Warnings() []string
	// Defragment frees the space compacted history still takes at once.
	Defragment(ctx context.Context) error
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
	// of the key space at each compaction); f must not block, and calls
	// dropped once it no longer holds before (which holds every version
	// the compaction removes, so their memory is returned only then).
	OnCompact(f func(before *revision.Snapshot, rev int64, dropped func()))
}

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
		DbSizeInUse:      statusDBSize(s.be.DBSizeInUse()),
		DbSizeQuota:      s.be.QuotaBytes(),
		StorageVersion:   version.Version[:3] + ".0",
		DowngradeInfo:    &pb.DowngradeInfo{},
	}
	if err := s.be.Health(); err != nil {
		resp.Errors = append(resp.Errors, rpctypes.ErrGRPCNoLeader.Error())
		select {
		case <-s.be.Halted():
			// ZooKeeper's data went back under it, or holds a newer
			// format: what happened, what to do.
			resp.Errors = append(resp.Errors, err.Error())
		default:
		}
	} else if _, leader := s.be.Leader(); leader != 0 {
		resp.Leader = leader
	} else {
		resp.Leader = s.be.MemberID()
	}
	for _, a := range s.be.Alarms() {
		resp.Errors = append(resp.Errors, alarmText(a))
	}
	resp.Errors = append(resp.Errors, s.be.Warnings()...)
	return resp, nil
}

// alarmText is etcd's Status error for an alarm: the AlarmMember in
// protobuf text form, "memberID:<id> alarm:<type>". It is written out here
// because the text form of Go's protobuf library varies its spacing from one
// binary to another on purpose; this is the form etcd 3.7.3's binary prints.
func alarmText(a *pb.AlarmMember) string {
	return fmt.Sprintf("memberID:%d alarm:%s", a.MemberID, a.Alarm)
}

// statusDBSize is the DbSize (and DbSizeInUse) Status reports for a size
// of the space accounting. It is never 0: a fresh root has applied no entry yet,
// and etcdctl's `endpoint status` table divides by DbSize (etcdctl 3.7.3
// panics with an integer divide by zero on a 0), while etcd's own database
// file is never empty either.
func statusDBSize(applied int64) int64 { return max(applied, 1) }

// Alarm is etcd's alarm RPC (`etcdctl alarm list`, `alarm disarm`): the
// alarms are in the revision log, so every instance lists, raises and
// clears the same ones.
func (s *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	alarms, err := s.be.Alarm(ctx, r)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	hdr := &pb.ResponseHeader{}
	s.hdr.fill(hdr)
	return &pb.AlarmResponse{Header: hdr, Alarms: alarms}, nil
}

// Defragment frees at once what compacted history still holds in
// ZooKeeper (the log below the current base generation and the generation
// before it) instead of at the next compaction. ZooKeeper's own files
// (snapshots and transaction logs) are ZooKeeper's: its autopurge settings
// reclaim them.
func (s *maintenanceServer) Defragment(ctx context.Context, _ *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	if err := s.be.Defragment(ctx); err != nil {
		return nil, toGRPCError(s.lg, err)
	}
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
