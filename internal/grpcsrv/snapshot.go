package grpcsrv

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/zketcd/zketcd/internal/etcdformat"
)

// Snapshot streams the key space as an etcd 3.7 backend database
// (etcdformat.WriteDB), followed by its SHA-256, as etcd does: `etcdctl
// snapshot save` writes a file that `etcdutl snapshot status` and `snapshot
// restore` accept and an etcd started on it serves the same keys, revisions,
// leases and compacted revision. The snapshot is this instance's view at one
// revision, at or after every write acknowledged before the request (a read
// barrier first): the view's state is copied under its read lock (pointers only),
// the database is written to a temporary file outside the lock while writes
// go on, streamed in 32 KiB chunks and removed.
func (s *maintenanceServer) Snapshot(_ *pb.SnapshotRequest, srv grpc.ServerStreamingServer[pb.SnapshotResponse]) error {
	start := time.Now()
	// Unlike an etcd member, which snapshots what it has applied, wait for
	// every write acknowledged by any instance before the request: a
	// snapshot taken for a move after the writers stopped then holds all
	// of their writes, whichever instance answered them.
	if err := s.be.Linearize(srv.Context()); err != nil {
		return toGRPCError(s.lg, err)
	}
	snap := s.be.Snapshot()
	dir, err := os.MkdirTemp("", "zketcd-snapshot-")
	if err != nil {
		return toGRPCError(s.lg, fmt.Errorf("snapshot: %w", err))
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "snapshot.db")
	st, err := etcdformat.WriteDB(path, snap, etcdformat.DBInfo{
		ConsistentIndex: uint64(snap.State.LSN),
		Term:            max(uint64(snap.State.Zxid>>32), 1),
	})
	if err != nil {
		return toGRPCError(s.lg, err)
	}
	lg := s.lg.WithFields(map[string]any{"revision": st.Rev, "compact-revision": st.Compacted,
		"keys": st.Keys, "records": st.Records, "leases": st.Leases, "total-bytes": st.Size})
	lg.WithField("took", time.Since(start)).Info("sending database snapshot to client")
	f, err := os.Open(path)
	if err != nil {
		return toGRPCError(s.lg, fmt.Errorf("snapshot: %w", err))
	}
	defer f.Close()
	err = etcdformat.Stream(f, st.Size, func(blob []byte, remaining uint64) error {
		return srv.Send(&pb.SnapshotResponse{RemainingBytes: remaining, Blob: blob, Version: etcdformat.StorageVersion})
	})
	if err != nil {
		return toGRPCError(s.lg, err)
	}
	lg.WithField("took", time.Since(start)).Info("sent database snapshot and its sha256 checksum")
	return nil
}
