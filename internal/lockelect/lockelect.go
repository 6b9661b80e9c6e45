package lockelect

import (
	"context"
	"errors"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	epb "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	egw "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb/gw"
	lpb "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	lgw "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb/gw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/zketcd/zketcd/internal/httpgw"
)

// Register registers the Lock and Election services on srv, built on conn
// (a connection to srv itself). The returned close function releases the
// client; conn stays the caller's.
func Register(srv *grpc.Server, conn *grpc.ClientConn) (closeFn func()) {
	ctx, cancel := context.WithCancel(context.Background())
	c := clientv3.NewCtxClient(ctx)
	c.KV = clientv3.NewKVFromKVClient(pb.NewKVClient(conn), c)
	c.Lease = clientv3.NewLeaseFromLeaseClient(pb.NewLeaseClient(conn), c, 5*time.Second)
	c.Watcher = clientv3.NewWatchFromWatchClient(pb.NewWatchClient(conn), c)
	lpb.RegisterLockServer(srv, &lockServer{c: c})
	epb.RegisterElectionServer(srv, &electionServer{c: c})
	return func() {
		cancel()
		c.Watcher.Close()
		c.Lease.Close()
	}
}

// Gateways are the services' gateway registrations (etcd serves
// /v3/lock/* and /v3/election/* too).
func Gateways() []httpgw.RegisterFunc {
	return []httpgw.RegisterFunc{lgw.RegisterLockHandler, egw.RegisterElectionHandler}
}

// errMissingLeaderKey is etcd's answer to Proclaim or Resign without a
// leader key.
var errMissingLeaderKey = errors.New(`"leader" field must be provided`)

// inner is ctx for the inner calls of a request: its auth token, if any
// (gRPC metadata "token", or "authorization" from the gateway), travels
// with them.
func inner(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, k := range []string{rpctypes.TokenFieldNameGRPC, rpctypes.TokenFieldNameSwagger} {
		if tok := md.Get(k); len(tok) > 0 {
			return metadata.AppendToOutgoingContext(ctx, k, tok[0])
		}
	}
	return ctx
}

// Errors of the inner calls are returned as they are: clientv3 has made
// them rpctypes errors, which gRPC sends with code Unknown and etcd's
// message, exactly as etcd's own services answer.

// session is a concurrency session on lease (0: a new lease of the
// recipes' default TTL, 60 s) whose lease is not kept alive by this
// server: the client keeps it, as on etcd.
func session(ctx context.Context, c *clientv3.Client, lease int64) (*concurrency.Session, error) {
	s, err := concurrency.NewSession(c, concurrency.WithLease(clientv3.LeaseID(lease)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	s.Orphan()
	return s, nil
}

type lockServer struct {
	lpb.UnsafeLockServer
	c *clientv3.Client
}

// Lock waits until the caller holds the lock name (a key under name/
// attached to the request's lease) and returns that key.
func (l *lockServer) Lock(ctx context.Context, r *lpb.LockRequest) (*lpb.LockResponse, error) {
	ctx = inner(ctx)
	s, err := session(ctx, l.c, r.Lease)
	if err != nil {
		return nil, err
	}
	m := concurrency.NewMutex(s, string(r.Name))
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return &lpb.LockResponse{Header: m.Header(), Key: []byte(m.Key())}, nil
}

// Unlock deletes a lock's key.
func (l *lockServer) Unlock(ctx context.Context, r *lpb.UnlockRequest) (*lpb.UnlockResponse, error) {
	resp, err := l.c.Delete(inner(ctx), string(r.Key))
	if err != nil {
		return nil, err
	}
	return &lpb.UnlockResponse{Header: resp.Header}, nil
}

type electionServer struct {
	epb.UnsafeElectionServer
	c *clientv3.Client
}

// Campaign waits until the caller leads the election name with value.
func (e *electionServer) Campaign(ctx context.Context, r *epb.CampaignRequest) (*epb.CampaignResponse, error) {
	ctx = inner(ctx)
	s, err := session(ctx, e.c, r.Lease)
	if err != nil {
		return nil, err
	}
	el := concurrency.NewElection(s, string(r.Name))
	if err := el.Campaign(ctx, string(r.Value)); err != nil {
		return nil, err
	}
	return &epb.CampaignResponse{Header: el.Header(), Leader: &epb.LeaderKey{
		Name: r.Name, Key: []byte(el.Key()), Rev: el.Rev(), Lease: int64(s.Lease()),
	}}, nil
}

// resume is the election a leader key names.
func (e *electionServer) resume(ctx context.Context, k *epb.LeaderKey) (*concurrency.Election, error) {
	if k == nil {
		return nil, errMissingLeaderKey
	}
	s, err := session(ctx, e.c, k.Lease)
	if err != nil {
		return nil, err
	}
	return concurrency.ResumeElection(s, string(k.Name), string(k.Key), k.Rev), nil
}

// Proclaim sets the leader's value, if the caller still leads.
func (e *electionServer) Proclaim(ctx context.Context, r *epb.ProclaimRequest) (*epb.ProclaimResponse, error) {
	ctx = inner(ctx)
	el, err := e.resume(ctx, r.Leader)
	if err != nil {
		return nil, err
	}
	if err := el.Proclaim(ctx, string(r.Value)); err != nil {
		return nil, err
	}
	return &epb.ProclaimResponse{Header: el.Header()}, nil
}

// Resign gives up leadership, if the caller leads.
func (e *electionServer) Resign(ctx context.Context, r *epb.ResignRequest) (*epb.ResignResponse, error) {
	ctx = inner(ctx)
	el, err := e.resume(ctx, r.Leader)
	if err != nil {
		return nil, err
	}
	if err := el.Resign(ctx); err != nil {
		return nil, err
	}
	return &epb.ResignResponse{Header: el.Header()}, nil
}

// Leader returns the current leader's key and value ("election: no
// leader" without one). The election is read with the session of a
// lease that is never granted (-1), as etcd does: reading needs none.
func (e *electionServer) Leader(ctx context.Context, r *epb.LeaderRequest) (*epb.LeaderResponse, error) {
	ctx = inner(ctx)
	s, err := session(ctx, e.c, -1)
	if err != nil {
		return nil, err
	}
	resp, err := concurrency.NewElection(s, string(r.Name)).Leader(ctx)
	if err != nil {
		return nil, err
	}
	return &epb.LeaderResponse{Header: resp.Header, Kv: resp.Kvs[0]}, nil
}

// Observe streams the leader and every change of it until the client
// goes away.
func (e *electionServer) Observe(r *epb.LeaderRequest, stream epb.Election_ObserveServer) error {
	ctx := inner(stream.Context())
	s, err := session(ctx, e.c, -1)
	if err != nil {
		return err
	}
	ch := concurrency.NewElection(s, string(r.Name)).Observe(ctx)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case resp, ok := <-ch:
			if !ok {
				return nil
			}
			if err := stream.Send(&epb.LeaderResponse{Header: resp.Header, Kv: resp.Kvs[0]}); err != nil {
				return err
			}
		}
	}
}
