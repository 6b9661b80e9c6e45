package grpcsrv

import (
	"context"
	"crypto/tls"
	"errors"
	"runtime"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/internal/auth"
)

// authorizer checks every request against the auth store as etcd 3.7 does
// (etcd's apply-time and API-layer checks, done here before the request
// reaches the engine). With authentication off every check passes.
type authorizer struct {
	st *auth.Store
	// localSecret: tokens are signed with a secret outside ZooKeeper.
	localSecret bool
	// canEnable is Auth.CanEnableAuth: nil, or why AuthEnable is refused.
	canEnable func() error
	// linearize waits until the view has applied every committed entry.
	linearize func(ctx context.Context) error
	// leaseKeys returns the keys attached to a lease, and whether it exists.
	leaseKeys func(id int64) ([][]byte, bool)
	// leaseIDs lists the leases.
	leaseIDs func() []int64
}

// recheckKey marks the context of a check made inside the committer's
// batch (see unary): it must not wait for the log or read the view, whose
// read lock the committer holds.
type recheckKey struct{}

// info returns who the request comes from, by the state of c. When its
// token was issued at a newer auth revision than this instance has applied
// (it logged in through another instance), the view catches up first, so
// that a user created elsewhere is known here.
func (a *authorizer) info(ctx context.Context, c auth.Checker) (*auth.Info, error) {
	ai, err := a.st.AuthInfoAt(ctx, c)
	if err != nil || ai == nil || ctx.Value(recheckKey{}) != nil {
		return ai, err
	}
	if ai.Revision > c.Revision() {
		if err := a.linearize(ctx); err != nil {
			return nil, err
		}
	}
	return ai, nil
}

// admin is etcd's check for root-only RPCs.
func (a *authorizer) admin(ctx context.Context, c auth.Checker) error {
	ai, err := a.info(ctx, c)
	if err != nil {
		return err
	}
	return c.CheckAdmin(ai)
}

// requireInfo is etcd's check for RPCs any authenticated user may call.
func (a *authorizer) requireInfo(ctx context.Context, c auth.Checker) error {
	ai, err := a.info(ctx, c)
	if err != nil {
		return err
	}
	if ai == nil {
		return rpctypes.ErrGRPCUserEmpty
	}
	return nil
}

// recipeService reports the services built as clients of the others
// (lockelect): etcd's v3lock and v3election.
func recipeService(method string) bool {
	return strings.HasPrefix(method, "/v3lockpb.Lock/") || strings.HasPrefix(method, "/v3electionpb.Election/")
}

// recipeIdentity gives a recipe call a token for its inner calls when its
// caller authenticated by client certificate (the inner calls travel over
// the in-process connection, which has no certificate); a call with a
// token, or without any identity, is left as it is (its inner calls are
// refused as etcd refuses them then).
func (a *authorizer) recipeIdentity(ctx context.Context, c auth.Checker) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md[rpctypes.TokenFieldNameGRPC]) > 0 || len(md[rpctypes.TokenFieldNameSwagger]) > 0 {
		return ctx, nil
	}
	ai, err := a.info(ctx, c)
	if err != nil || ai == nil {
		return ctx, err
	}
	tok, err := a.st.TokenFor(ai.Username)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "etcdserver: no token for %s's lock and election calls: %v", ai.Username, err)
	}
	md = md.Copy()
	md.Set(rpctypes.TokenFieldNameGRPC, tok)
	return metadata.NewIncomingContext(ctx, md), nil
}

// unary checks the unary RPCs.
func (a *authorizer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c := a.st.Checker()
	if c.Enabled() {
		if err := a.check(ctx, info.FullMethod, req, c); err != nil {
			return nil, err
		}
		if recipeService(info.FullMethod) {
			var err error
			if ctx, err = a.recipeIdentity(ctx, c); err != nil {
				return nil, err
			}
		}
	}
	// A write is checked again inside its batch if the auth state changed
	// since (a revocation, or auth enabled, committed in between), as etcd
	// checks writes when it applies them.
	recheck := auth.Check(func(state []byte) error {
		if c.Same(state) {
			return nil
		}
		at, err := a.st.CheckerFor(state)
		if err != nil || !at.Enabled() {
			return err
		}
		return a.check(context.WithValue(ctx, recheckKey{}, true), info.FullMethod, req, at)
	})
	// The caller's credential travels with a request the engine forwards
	// to the leader instance, which checks it again (ForwardAuthorizer).
	return handler(auth.WithCheck(a.withCaller(ctx), recheck), req)
}

// withCaller attaches the credential ctx's request presents, for the
// engine to forward with it, and for a token the proof this instance
// accepts it, made if and when the request is forwarded.
func (a *authorizer) withCaller(ctx context.Context) context.Context {
	if a == nil {
		return ctx
	}
	c := a.st.CallerOf(ctx)
	if c.Token != "" {
		ctx = auth.WithVouch(ctx, a.st.Voucher(c.Token))
	}
	return auth.WithCaller(ctx, c)
}

// stream checks the streaming RPCs: Snapshot is root-only, RangeStream's
// request is checked as a Range when it arrives; Watch and LeaseKeepAlive
// check each request in their handlers.
func (a *authorizer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c := a.st.Checker()
	if !c.Enabled() {
		return handler(srv, ss)
	}
	switch info.FullMethod {
	case "/etcdserverpb.Maintenance/Snapshot":
		if err := a.admin(ss.Context(), c); err != nil {
			return err
		}
	case "/etcdserverpb.KV/RangeStream":
		return handler(srv, &checkedStream{ServerStream: ss, a: a, method: info.FullMethod})
	}
	if recipeService(info.FullMethod) { // Observe
		ctx, err := a.recipeIdentity(ss.Context(), c)
		if err != nil {
			return err
		}
		return handler(srv, &contextStream{ServerStream: ss, ctx: ctx})
	}
	return handler(srv, ss)
}

// contextStream is a stream with another context.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

// checkedStream checks every request a client stream delivers before the
// handler sees it.
type checkedStream struct {
	grpc.ServerStream
	a      *authorizer
	method string
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.a.check(s.Context(), s.method, m, s.a.st.Checker())
}

func (a *authorizer) check(ctx context.Context, method string, req any, c auth.Checker) error {
	if strings.HasPrefix(method, "/grpc.health.v1.") {
		return nil // probes never carry credentials
	}
	if recipeService(method) {
		// v3lock and v3election are clientv3 recipes over KV, Lease and
		// Watch: as etcd, zketcd checks only their inner calls, which
		// carry the caller's identity (see recipeIdentity).
		return nil
	}
	switch method {
	case "/etcdserverpb.Auth/Authenticate":
		return nil // no credentials needed
	case "/etcdserverpb.Auth/AuthStatus":
		_, err := a.info(ctx, c) // only a bad token is refused
		return err
	case "/etcdserverpb.Cluster/MemberList", "/etcdserverpb.Lease/LeaseGrant":
		return a.requireInfo(ctx, c)
	case "/etcdserverpb.Auth/UserGet":
		ai, err := a.info(ctx, c)
		if err != nil {
			return err
		}
		if err := c.CheckAdmin(ai); err != nil && (ai == nil || ai.Username != req.(*pb.AuthUserGetRequest).Name) {
			return err
		}
		return nil
	case "/etcdserverpb.Auth/RoleGet":
		ai, err := a.info(ctx, c)
		if err != nil {
			return err
		}
		if err := c.CheckAdmin(ai); err != nil && (ai == nil || !c.HasRole(ai.Username, req.(*pb.AuthRoleGetRequest).Role)) {
			return err
		}
		return nil
	case "/etcdserverpb.Maintenance/Status":
		return a.requireInfo(ctx, c)
	case "/etcdserverpb.Maintenance/Alarm":
		if req.(*pb.AlarmRequest).Action == pb.AlarmRequest_GET {
			return a.requireInfo(ctx, c)
		}
		return a.admin(ctx, c)
	}
	switch r := req.(type) {
	case *pb.RangeRequest:
		ai, err := a.info(ctx, c)
		if err != nil {
			return err
		}
		return c.CheckRange(ai, r.Key, r.RangeEnd)
	case *pb.PutRequest:
		ai, err := a.info(ctx, c)
		if err != nil {
			return err
		}
		return a.checkPut(ctx, c, ai, r)
	case *pb.DeleteRangeRequest:
		ai, err := a.info(ctx, c)
		if err != nil {
			return err
		}
		return a.checkDelete(c, ai, r)
	case *pb.TxnRequest:
		ai, err := a.info(ctx, c)
		if err != nil {
			return err
		}
		return a.checkTxn(ctx, c, ai, r)
	case *pb.LeaseRevokeRequest:
		ai, err := a.info(ctx, c)
		if err != nil {
			return err
		}
		if ai == nil {
			return rpctypes.ErrGRPCUserEmpty
		}
		return a.checkLeaseKeys(ctx, c, ai, r.ID, false)
	case *pb.LeaseTimeToLiveRequest:
		ai, err := a.info(ctx, c)
		if err != nil {
			return err
		}
		if ai == nil {
			return rpctypes.ErrGRPCUserEmpty
		}
		if !r.Keys {
			return nil // as etcd: attached keys are checked only when listed
		}
		return a.checkLeaseKeys(ctx, c, ai, r.ID, true)
	case *pb.LeaseLeasesRequest:
		ai, err := a.info(ctx, c)
		if err != nil {
			return err
		}
		if ai == nil {
			return rpctypes.ErrGRPCUserEmpty
		}
		if c.CheckAdmin(ai) == nil {
			return nil
		}
		if ctx.Value(recheckKey{}) != nil {
			return nil // never inside a batch (LeaseLeases writes nothing)
		}
		for _, id := range a.leaseIDs() {
			if err := a.checkLeaseKeys(ctx, c, ai, id, true); err != nil {
				return err
			}
		}
		return nil
	}
	// Everything else (Compact, the Auth admin RPCs, Maintenance and
	// membership changes) is root-only, as in etcd; so is any service
	// without checks of its own here.
	return a.admin(ctx, c)
}

func (a *authorizer) checkPut(ctx context.Context, c auth.Checker, ai *auth.Info, r *pb.PutRequest) error {
	if err := c.CheckPut(ai, r.Key); err != nil {
		return err
	}
	if err := a.checkLeaseKeys(ctx, c, ai, r.Lease, false); err != nil {
		return err
	}
	if r.PrevKv {
		return c.CheckRange(ai, r.Key, nil)
	}
	return nil
}

func (a *authorizer) checkDelete(c auth.Checker, ai *auth.Info, r *pb.DeleteRangeRequest) error {
	if err := c.CheckDelete(ai, r.Key, r.RangeEnd); err != nil {
		return err
	}
	if r.PrevKv {
		return c.CheckRange(ai, r.Key, r.RangeEnd)
	}
	return nil
}

// checkTxn checks the compares, then every op of both branches, nested
// transactions included, as etcd does.
func (a *authorizer) checkTxn(ctx context.Context, c auth.Checker, ai *auth.Info, r *pb.TxnRequest) error {
	for _, cmp := range r.Compare {
		if err := c.CheckRange(ai, cmp.Key, cmp.RangeEnd); err != nil {
			return err
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			var err error
			switch v := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				if v.RequestRange != nil {
					err = c.CheckRange(ai, v.RequestRange.Key, v.RequestRange.RangeEnd)
				}
			case *pb.RequestOp_RequestPut:
				if v.RequestPut != nil {
					err = a.checkPut(ctx, c, ai, v.RequestPut)
				}
			case *pb.RequestOp_RequestDeleteRange:
				if d := v.RequestDeleteRange; d != nil {
					if d.PrevKv {
						err = c.CheckRange(ai, d.Key, d.RangeEnd)
					}
					if err == nil {
						err = c.CheckDelete(ai, d.Key, d.RangeEnd)
					}
				}
			case *pb.RequestOp_RequestTxn:
				if v.RequestTxn != nil {
					err = a.checkTxn(ctx, c, ai, v.RequestTxn)
				}
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// checkLeaseKeys is etcd's check of a lease's attached keys: root passes;
// anyone else needs WRITE (read: READ) permission on each key attached to
// lease id. A lease that does not exist (or 0) has no keys.
func (a *authorizer) checkLeaseKeys(ctx context.Context, c auth.Checker, ai *auth.Info, id int64, read bool) error {
	if id == 0 || ctx.Value(recheckKey{}) != nil {
		// Inside the batch the view cannot be read: the lease's keys were
		// checked before.
		return nil
	}
	keys, ok := a.leaseKeys(id)
	if !ok {
		return nil
	}
	if c.CheckAdmin(ai) == nil {
		return nil
	}
	for _, k := range keys {
		var err error
		if read {
			err = c.CheckRange(ai, k, nil)
		} else {
			err = c.CheckPut(ai, k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// leaseRenew is etcd's check of one keepalive: an authenticated user, root
// or with WRITE permission on every key attached to the lease.
func (a *authorizer) leaseRenew(ctx context.Context, id int64) error {
	if a == nil {
		return nil
	}
	return a.leaseRenewAt(ctx, a.st.Checker(), id)
}

// leaseRenewAt is leaseRenew against the state of c.
func (a *authorizer) leaseRenewAt(ctx context.Context, c auth.Checker, id int64) error {
	if !c.Enabled() {
		return nil
	}
	ai, err := a.info(ctx, c)
	if err != nil {
		return err
	}
	if ai == nil {
		return rpctypes.ErrGRPCUserEmpty
	}
	return a.checkLeaseKeys(ctx, c, ai, id, false)
}

// watchCreate checks READ permission on a watch's range; it returns the
// cancel reason etcd sends, or "".
func (a *authorizer) watchCreate(ctx context.Context, creq *pb.WatchCreateRequest) string {
	if a == nil {
		return ""
	}
	c := a.st.Checker()
	if !c.Enabled() {
		return ""
	}
	ai, err := a.info(ctx, c)
	if err == nil {
		err = c.CheckRange(ai, creq.Key, creq.RangeEnd)
	}
	switch {
	case err == nil:
		return ""
	case errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken), errors.Is(err, rpctypes.ErrGRPCAuthOldRevision),
		errors.Is(err, rpctypes.ErrGRPCUserEmpty):
		return err.Error()
	}
	return rpctypes.ErrGRPCPermissionDenied.Error()
}

// AuthConfig configures authentication.
type AuthConfig struct {
	// Tokens issues and verifies tokens (etcd's --auth-token; nil: simple
	// tokens with auth.DefaultTokenTTL). The server closes it when its
	// context ends.
	Tokens auth.TokenProvider
	// BcryptCost is the cost of password hashes (etcd's --bcrypt-cost; 0:
	// bcrypt's default, 10).
	BcryptCost int
}

// simpleSecretWarning is logged when authentication is enabled (at
// AuthEnable, and at every start while it is) with simple tokens signed by
// the auth store's secret alone.
const simpleSecretWarning = "authentication is enabled with simple tokens signed by a secret kept in ZooKeeper: whoever reads ZooKeeper's data " +
	"(its ACL identity, a copy of its data directory, a backup) can mint tokens; give every instance the same --auth-token simple,secret-file=<file> or use jwt"

// newAuthorizer builds the auth store on be's view and its authorizer. The
// common name of a verified client certificate authenticates when the
// server requires client certificates (etcd's --client-cert-auth); a start
// with authentication enabled and simple tokens without a secret file
// logs simpleSecretWarning.
func newAuthorizer(ctx context.Context, cfg Config, be Auth) *authorizer {
	clientCert := cfg.TLS != nil && cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert
	st := auth.NewStore(be.AuthState, auth.Config{
		BcryptCost: cfg.Auth.BcryptCost, Tokens: cfg.Auth.Tokens, ClientCertAuth: clientCert, Logger: cfg.Logger,
	})
	go func() {
		<-ctx.Done()
		st.Close()
	}()
	localSecret := cfg.Auth.Tokens != nil && auth.LocalSecret(cfg.Auth.Tokens)
	if !localSecret && st.Checker().Enabled() && cfg.Logger != nil {
		cfg.Logger.Warn(simpleSecretWarning)
	}
	return &authorizer{
		st:          st,
		localSecret: localSecret,
		canEnable:   be.CanEnableAuth,
		linearize:   be.Linearize,
		leaseKeys:   be.LeaseKeys,
		leaseIDs:    be.LeaseIDs,
	}
}

// newAuthServer returns the Auth service on az's store.
func newAuthServer(az *authorizer, be Auth, hdr header, lg *logrus.Entry, reg prometheus.Registerer) *authServer {
	return &authServer{st: az.st, hdr: hdr, lg: lg, write: be.AuthWrite, linearize: be.Linearize, canEnable: az.canEnable,
		localSecret: az.localSecret, guesses: newAuthLimiter(reg), checks: make(chan struct{}, runtime.GOMAXPROCS(0))}
}
