package fleetadmin

import (
	"context"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// kvServer is etcd's KV service for the administration: each request goes
// to the one tenant whose roles grant the administrator's access to its
// whole key range (read for Range, write for the others), and is refused
// with etcd's "permission denied" when no tenant's do, or when a Txn's
// operations would reach two tenants. Compact names no key, so it is
// refused: each tenant compacts its own cluster.
type kvServer struct {
	pb.UnimplementedKVServer
	f Fleet

	mu      sync.Mutex
	changes int32
	table   []grant
	built   bool
}

// grant is one permission of one tenant.
type grant struct {
	tenant string
	p      perm
}

// routes returns the grants as of the registry's current change count,
// rebuilding them when it moved.
func (s *kvServer) routes() ([]grant, error) {
	reg := s.f.TenantRegistry()
	changes, err := reg.Changes()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.built && s.changes == changes {
		t := s.table
		s.mu.Unlock()
		return t, nil
	}
	s.mu.Unlock()
	recs, changes, _, err := reg.Tenants(false)
	if err != nil {
		return nil, err
	}
	var table []grant
	for _, rec := range recs {
		if rec.State != zkstore.TenantActive {
			continue
		}
		perms, err := permsOf(reg, rec)
		if err != nil {
			return nil, err
		}
		for _, p := range perms {
			table = append(table, grant{tenant: rec.Name, p: p})
		}
	}
	s.mu.Lock()
	s.table, s.changes, s.built = table, changes, true
	s.mu.Unlock()
	return table, nil
}

// span is one key range a request touches and how.
type span struct {
	key, end []byte
	write    bool
}

// route finds the one tenant whose grants cover every span.
func (s *kvServer) route(spans ...span) (string, error) {
	table, err := s.routes()
	if err != nil {
		return "", registryErr(err)
	}
	tenant := ""
	for _, sp := range spans {
		found := ""
		for _, g := range table {
			if g.p.covers(sp.key, sp.end, sp.write) {
				found = g.tenant
				break
			}
		}
		if found == "" || (tenant != "" && found != tenant) {
			return "", rpctypes.ErrGRPCPermissionDenied
		}
		tenant = found
	}
	if tenant == "" {
		return "", rpctypes.ErrGRPCPermissionDenied
	}
	return tenant, nil
}

func (s *kvServer) kv(ctx context.Context, spans ...span) (pb.KVClient, error) {
	t, err := s.route(spans...)
	if err != nil {
		return nil, err
	}
	return s.f.KV(ctx, t)
}

func (s *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	kv, err := s.kv(ctx, span{key: r.Key, end: r.RangeEnd})
	if err != nil {
		return nil, err
	}
	return kv.Range(ctx, r)
}

func (s *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	kv, err := s.kv(ctx, span{key: r.Key, write: true})
	if err != nil {
		return nil, err
	}
	return kv.Put(ctx, r)
}

func (s *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	kv, err := s.kv(ctx, span{key: r.Key, end: r.RangeEnd, write: true})
	if err != nil {
		return nil, err
	}
	return kv.DeleteRange(ctx, r)
}

func (s *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	var spans []span
	txnSpans(r, &spans)
	kv, err := s.kv(ctx, spans...)
	if err != nil {
		return nil, err
	}
	return kv.Txn(ctx, r)
}

func (s *kvServer) Compact(context.Context, *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return nil, rpctypes.ErrGRPCPermissionDenied
}

// txnSpans lists every range a Txn reads or writes, its nested ones too.
func txnSpans(r *pb.TxnRequest, out *[]span) {
	for _, c := range r.Compare {
		*out = append(*out, span{key: c.Key, end: c.RangeEnd})
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch o := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				*out = append(*out, span{key: o.RequestRange.Key, end: o.RequestRange.RangeEnd})
			case *pb.RequestOp_RequestPut:
				*out = append(*out, span{key: o.RequestPut.Key, write: true})
			case *pb.RequestOp_RequestDeleteRange:
				*out = append(*out, span{key: o.RequestDeleteRange.Key, end: o.RequestDeleteRange.RangeEnd, write: true})
			case *pb.RequestOp_RequestTxn:
				txnSpans(o.RequestTxn, out)
			}
		}
	}
}
