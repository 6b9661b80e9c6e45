package grpcsrv

import (
	"context"
	"crypto/tls"
	"runtime"

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

// authorizer is the interceptor of etcd's permission checks: every RPC is
// checked by the auth store's rules (auth.Rules) before it reaches the
// engine, and a write again in its commit batch if the auth state changed
// meanwhile; the credential it presents travels with it when the engine
// forwards it. With authentication off every check passes.
type authorizer struct {
	rules *auth.Rules
	st    *auth.Store
	// localSecret: tokens are signed with a secret outside ZooKeeper.
	localSecret bool
	// canEnable is Auth.CanEnableAuth: nil, or why AuthEnable is refused.
	canEnable func() error
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
	ai, err := a.rules.Info(ctx, c)
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
		if err := a.rules.Check(ctx, info.FullMethod, req, c); err != nil {
			return nil, err
		}
		if auth.RecipeService(info.FullMethod) {
			var err error
			if ctx, err = a.recipeIdentity(ctx, c); err != nil {
				return nil, err
			}
		}
	}
	// A write is checked again inside its batch if the auth state changed
	// since (a revocation, or auth enabled, committed in between), as etcd
	// checks writes when it applies them. The caller's credential travels
	// with a request the engine forwards to the leader instance, which
	// checks it again (auth.Rules.Authorize).
	recheck := a.rules.Recheck(ctx, info.FullMethod, req, c)
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
		if err := a.rules.Admin(ss.Context(), c); err != nil {
			return err
		}
	case "/etcdserverpb.KV/RangeStream":
		return handler(srv, &checkedStream{ServerStream: ss, a: a, method: info.FullMethod})
	}
	if auth.RecipeService(info.FullMethod) { // Observe
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
	return s.a.rules.Check(s.Context(), s.method, m, s.a.st.Checker())
}

// leaseRenew is etcd's check of one keepalive (auth.Rules.LeaseRenew); a
// nil authorizer checks nothing.
func (a *authorizer) leaseRenew(ctx context.Context, id int64) error {
	if a == nil {
		return nil
	}
	return a.rules.LeaseRenew(ctx, id)
}

// watchCreate checks READ permission on a watch's range; it returns the
// cancel reason etcd sends, or "" (auth.Rules.WatchCreate); a nil
// authorizer checks nothing.
func (a *authorizer) watchCreate(ctx context.Context, creq *pb.WatchCreateRequest) string {
	if a == nil {
		return ""
	}
	return a.rules.WatchCreate(ctx, creq.Key, creq.RangeEnd)
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
		rules:       auth.NewRules(st, be, be.CanEnableAuth),
		st:          st,
		localSecret: localSecret,
		canEnable:   be.CanEnableAuth,
	}
}

// newAuthServer returns the Auth service on az's store.
func newAuthServer(az *authorizer, be Auth, hdr header, lg *logrus.Entry, reg prometheus.Registerer) *authServer {
	return &authServer{st: az.st, hdr: hdr, lg: lg, write: be.AuthWrite, linearize: be.Linearize, canEnable: az.canEnable,
		localSecret: az.localSecret, guesses: newAuthLimiter(reg), checks: make(chan struct{}, runtime.GOMAXPROCS(0))}
}
