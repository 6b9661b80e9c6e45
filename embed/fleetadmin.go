package embed

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

	"github.com/zketcd/zketcd/internal/etcdformat"
	"github.com/zketcd/zketcd/internal/fleetadmin"
	"github.com/zketcd/zketcd/internal/httpgw"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// The fleet is what its administration acts on.
var _ fleetadmin.Fleet = (*Fleet)(nil)

// adminServer serves the connections of the fleet's administrators: the
// administration's etcd services and HTTP API; every other etcd call is
// refused with etcd's "permission denied".
type adminServer struct {
	srv *grpc.Server
	gw  *httpgw.Server
}

func newAdminServer(f *Fleet) (*adminServer, error) {
	srv := grpc.NewServer(grpc.Creds(httpgw.Creds()), grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return rpctypes.ErrGRPCPermissionDenied
	}))
	fleetadmin.Register(srv, f)
	api := fleetadmin.Handler(f)
	gw, err := httpgw.New(httpgw.Config{
		GRPC: srv, Leader: func() error { return nil },
		Read:     func(context.Context, bool) error { return nil },
		Handlers: map[string]http.Handler{fleetadmin.HTTPPrefix: api, fleetadmin.HTTPPrefix + "/": api},
		Logger:   f.cfg.Logger.WithField("component", "fleet-admin"),
	})
	if err != nil {
		srv.Stop()
		return nil, err
	}
	return &adminServer{srv: srv, gw: gw}, nil
}

func (a *adminServer) close() {
	a.gw.Close()
	a.srv.Stop()
}

// TenantRegistry returns the fleet's registry of tenants and roles.
func (f *Fleet) TenantRegistry() *zkstore.Registry { return f.reg }

// KV returns the KV service of tenant name's cluster, through the
// in-process connection of its stack on this instance.
func (f *Fleet) KV(_ context.Context, name string) (pb.KVClient, error) {
	s, err := f.stack(name)
	if err != nil {
		return nil, rpctypes.ErrGRPCPermissionDenied
	}
	return pb.NewKVClient(s.gw.Conn()), nil
}

// Delete marks tenant name deleting: every instance stops serving it, and
// each tries to complete the delete (the root, then the record) once no
// instance serves it.
func (f *Fleet) Delete(name string) error {
	if _, err := f.reg.MarkDeleting(name); err != nil {
		return err
	}
	f.finishDelete(name)
	return nil
}

// finishDelete completes a tenant's delete in the background, once (per
// instance at a time).
func (f *Fleet) finishDelete(name string) {
	f.mu.Lock()
	if f.deleting[name] || f.stopped {
		f.mu.Unlock()
		return
	}
	f.deleting[name] = true
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer func() {
			f.mu.Lock()
			delete(f.deleting, name)
			f.mu.Unlock()
		}()
		lg := f.lg.WithField("tenant", name)
		err := f.reg.DeleteTenant(f.ctx, name, time.Minute, func(n int64) { lg.WithField("znodes_deleted", n).Info("deleting the tenant") })
		switch {
		case err == nil:
		case f.ctx.Err() != nil:
		default:
			// Another instance may have completed it, or an instance still
			// serves it: the next registry change or start tries again.
			lg.WithError(err).Info("the tenant's delete did not complete here")
		}
	}()
}

// Snapshot writes tenant name's data, at or after every write acknowledged
// before the call, as an etcd snapshot file to w.
func (f *Fleet) Snapshot(ctx context.Context, name string, w io.Writer) (int64, error) {
	s, err := f.stack(name)
	if err != nil {
		return 0, err
	}
	if err := s.be.Linearize(ctx); err != nil {
		return 0, err
	}
	snap := s.be.Snapshot()
	dir, err := os.MkdirTemp("", "zketcd-tenant-snapshot-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "snapshot.db")
	st, err := etcdformat.WriteDB(path, snap, etcdformat.DBInfo{ConsistentIndex: uint64(snap.State.LSN), Term: max(uint64(snap.State.Zxid>>32), 1)})
	if err != nil {
		return 0, err
	}
	if err := etcdformat.AppendTrailer(path); err != nil {
		return 0, err
	}
	file, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer file.Close()
	if _, err := io.Copy(w, file); err != nil {
		return 0, fmt.Errorf("send the snapshot of tenant %s: %w", name, err)
	}
	return st.Rev, nil
}
