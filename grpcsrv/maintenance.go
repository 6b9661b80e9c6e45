package grpcsrv

import (
	"context"
	"errors"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/api/v3/version"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/backend"
)

// quotaBytes is reported as DbSizeQuota (etcd's default quota).
const quotaBytes = 2 << 30

type maintenanceServer struct {
	pb.UnsafeMaintenanceServer
	be  *backend.Backend
	hdr header
	lg  *logrus.Entry
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
	st := s.be.View().State()
	head := s.be.Head()
	resp := &pb.StatusResponse{
		Header:           hdr,
		Version:          version.Version,
		RaftIndex:        uint64(max(head.LSN, st.LSN)),
		RaftAppliedIndex: uint64(st.LSN),
		RaftTerm:         uint64(head.Zxid >> 32),
		DbSize:           statusDBSize(s.be.DBSize()),
		DbSizeInUse:      statusDBSize(s.be.DBSize()),
		DbSizeQuota:      quotaBytes,
		StorageVersion:   version.Version[:3] + ".0",
		DowngradeInfo:    &pb.DowngradeInfo{},
	}
	if err := s.be.Health(); err != nil {
		resp.Errors = append(resp.Errors, rpctypes.ErrGRPCNoLeader.Error())
		if errors.Is(err, backend.ErrHalted) {
			resp.Errors = append(resp.Errors, err.Error())
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

func (s *maintenanceServer) Hash(context.Context, *pb.HashRequest) (*pb.HashResponse, error) {
	return nil, status.Error(codes.Unimplemented, "zketcd: Hash is not supported (there is no bbolt file to hash)")
}

func (s *maintenanceServer) HashKV(context.Context, *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	return nil, status.Error(codes.Unimplemented, "zketcd: HashKV is not supported yet")
}

func (s *maintenanceServer) Snapshot(*pb.SnapshotRequest, grpc.ServerStreamingServer[pb.SnapshotResponse]) error {
	return status.Error(codes.Unimplemented, "zketcd: Snapshot is not supported yet; back up the ZooKeeper ensemble instead")
}

func (s *maintenanceServer) MoveLeader(context.Context, *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	return nil, status.Error(codes.Unimplemented, "zketcd: MoveLeader is not supported (ZooKeeper elects its own leader)")
}

func (s *maintenanceServer) Downgrade(context.Context, *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return nil, status.Error(codes.Unimplemented, "zketcd: Downgrade is not supported")
}
