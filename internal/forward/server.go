package forward

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/translate"
)

// Leader is what the internal endpoint serves (a *engine.Engine): the
// forwarded writes (engine.WriteKinds), the calls beside them
// (engine.CallKinds), and the token its callers present.
type Leader interface {
	ServeForward(ctx context.Context, call engine.ForwardCall) (proto.Message, engine.ForwardReply, error)
	ServeCall(ctx context.Context, method string, req proto.Message) (proto.Message, int64, error)
	InternalToken() string
}

var _ Leader = (*engine.Engine)(nil)

// Authorizer checks a forwarded request against the serving instance's
// own auth state (an *auth.Rules): Authorize returns the context to serve
// req with, or etcd's error refusing it: one of code FailedPrecondition
// when the request cannot run here whoever its caller (AuthEnable on a
// world-readable root), any other a refusal of the caller's credential.
// rpc is the etcd client API method of the request (engine.WriteKind.RPC,
// engine.CallKind.RPC); caller is the credential the client presented
// where the request entered, a CertCN only if the forwarding peer proved
// its own identity with a verified certificate.
type Authorizer interface {
	Authorize(ctx context.Context, rpc string, req proto.Message, caller auth.Caller) (context.Context, error)
}

// ServerConfig configures the internal endpoint's server.
type ServerConfig struct {
	// TLS, if not nil, serves the endpoint over TLS. A peer whose client
	// certificate it verified (ClientAuth RequireAndVerifyClientCert,
	// etcd's --peer-client-cert-auth) has proved its identity: only the
	// requests of such a peer may carry a client-certificate identity.
	TLS *tls.Config
	// MaxMessageBytes bounds every message the endpoint reads (the client
	// API's limit with the same overhead, grpcsrv.Config.RecvMsgLimit); a
	// larger one is refused from its length prefix, before anything is
	// read or allocated for it (0: 2 MiB).
	MaxMessageBytes int
	// Authorizer checks every forwarded request, write, keepalive and
	// lease read, against this instance's auth state (nil: no checks; only
	// tests of the protocol leave it out).
	Authorizer Authorizer
	// Route, if not nil, serves many clusters on one endpoint (a fleet's
	// tenants): every call must name its cluster in its headers (the
	// client's ForTenant), and Route gives that cluster's Leader and
	// Authorizer (false: not served here, refused as a bad token would
	// be). NewServer's Leader and Authorizer are then unused.
	Route      func(cluster string) (Leader, Authorizer, bool)
	Logger     *logrus.Entry
	Registerer prometheus.Registerer
}

// defaultMaxMessageBytes is etcd's default request limit with the gRPC
// overhead grpcsrv adds.
const defaultMaxMessageBytes = 2 * 1024 * 1024

// NewServer returns the internal gRPC server serving l. Every call must
// present l's token, checked from the call's headers before any message
// is read (PermissionDenied otherwise); every forwarded request is checked
// for its caller by cfg.Authorizer.
func NewServer(l Leader, cfg ServerConfig) *grpc.Server {
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = defaultMaxMessageBytes
	}
	s := &server{l: l, lg: cfg.Logger.WithField("component", "forward-server"), authz: cfg.Authorizer, route: cfg.Route, refused: newRefusedMetric(cfg.Registerer)}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes), grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.InTapHandle(s.admit),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	srv := grpc.NewServer(opts...)
	var methods []grpc.MethodDesc
	for _, k := range engine.WriteKinds() {
		methods = append(methods, write(k))
	}
	for _, k := range engine.CallKinds() {
		methods = append(methods, call(k))
	}
	sort.Slice(methods, func(i, j int) bool { return methods[i].MethodName < methods[j].MethodName })
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*any)(nil),
		Methods:     methods,
	}, s)
	return srv
}

type server struct {
	l       Leader
	lg      *logrus.Entry
	authz   Authorizer
	route   func(string) (Leader, Authorizer, bool)
	refused *prometheus.CounterVec
}

// served is the Leader and Authorizer a call is served by: the server's,
// or the routed cluster's, which admit put in the call's context.
type served struct {
	l     Leader
	authz Authorizer
}

type targetKey struct{}

func (s *server) target(ctx context.Context) served {
	if t, ok := ctx.Value(targetKey{}).(served); ok {
		return t
	}
	return served{l: s.l, authz: s.authz}
}

func newRefusedMetric(reg prometheus.Registerer) *prometheus.CounterVec {
	m := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "forward_refused_total",
		Help: "Calls the internal endpoint refused, by reason: bad_token (refused from its headers, before its message was read), no_caller (a forwarded request without its caller's credential while auth is enabled), denied (the caller's credential or permissions refused here).",
	}, []string{"reason"})
	if reg != nil {
		reg.MustRegister(m)
	}
	return m
}

// admit checks a call's token from its headers, before its message is
// read: a caller without it gets nothing allocated for its message.
func (s *server) admit(ctx context.Context, info *tap.Info) (context.Context, error) {
	t := served{l: s.l, authz: s.authz}
	if s.route != nil {
		name := info.Header.Get(mdCluster)
		var ok bool
		if len(name) == 1 {
			t.l, t.authz, ok = s.route(name[0])
		}
		if !ok {
			s.refused.WithLabelValues("bad_token").Inc()
			return nil, status.Error(codes.PermissionDenied, "zketcd: internal endpoint: no such cluster here")
		}
		ctx = context.WithValue(ctx, targetKey{}, t)
	}
	want := t.l.InternalToken()
	got := info.Header.Get(mdToken)
	if want == "" || len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), []byte(want)) != 1 {
		s.refused.WithLabelValues("bad_token").Inc()
		return nil, status.Error(codes.PermissionDenied, "zketcd: internal endpoint: bad token")
	}
	return ctx, nil
}

// authorize checks req for the caller its metadata names (see
// Authorizer) and returns the context to serve it with. A refusal of a
// request for want of its caller's credential answers outcomeBadToken
// (nothing ran: its origin, which checked its own client, may commit it
// itself, as an instance of an older build that forwards no credentials
// does); any other refusal — of the credential it carries, or of the
// request whoever sends it (FailedPrecondition) — is the request's final
// failure, with etcd's error.
func (s *server) authorize(ctx context.Context, rpc string, req proto.Message) (context.Context, error) {
	authz := s.target(ctx).authz
	if authz == nil {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	caller := auth.Caller{Token: first(md, mdCallerToken), Use: first(md, mdCallerUse)}
	if cn := first(md, mdCallerCN); cn != "" && caller.Token == "" && peerVerified(ctx) {
		caller.CertCN = cn
	}
	actx, err := authz.Authorize(ctx, rpc, req, caller)
	switch {
	case err == nil:
		return actx, nil
	case caller.Empty() && status.Code(err) != codes.FailedPrecondition:
		s.refused.WithLabelValues("no_caller").Inc()
		return nil, s.fail(ctx, outcomeBadToken, status.Error(codes.PermissionDenied,
			"zketcd: internal endpoint: auth is enabled and the request carries no credential of its caller"))
	}
	s.refused.WithLabelValues("denied").Inc()
	return nil, s.fail(ctx, outcomeFailed, statusOf(err))
}

// peerVerified reports whether ctx's connection is TLS with a client
// certificate this server verified.
func peerVerified(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	return ok && len(ti.State.VerifiedChains) > 0
}

// write is the method desc of a forwarded write of kind k.
func write(k engine.WriteKind) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: k.Method, Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		s := srv.(*server)
		req := k.NewRequest()
		if err := dec(req); err != nil {
			return nil, err
		}
		return s.forward(ctx, k, req)
	}}
}

// call is the method desc of a call beside the forwarded writes, of kind
// k: its request checked for its client (k.RPC, if any), and the
// response, with the position the caller waits for in the mdLSN header (a
// Positioned call), or the not-leader outcome.
func call(k engine.CallKind) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: k.Method, Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		s := srv.(*server)
		req := k.NewRequest()
		if err := dec(req); err != nil {
			return nil, err
		}
		if k.RPC != "" {
			var err error
			if ctx, err = s.authorize(ctx, k.RPC, req); err != nil {
				return nil, err
			}
		}
		resp, lsn, err := s.target(ctx).l.ServeCall(ctx, k.Method, req)
		switch {
		case errors.Is(err, engine.ErrNotLeader):
			return nil, s.fail(ctx, outcomeNotLeader, status.Error(codes.Unavailable, err.Error()))
		case err != nil:
			return nil, statusOf(err)
		}
		if k.Positioned {
			if err := grpc.SetHeader(ctx, metadata.Pairs(mdLSN, strconv.FormatInt(lsn, 10))); err != nil {
				return nil, err
			}
		}
		return resp, nil
	}}
}

func (s *server) forward(ctx context.Context, k engine.WriteKind, req proto.Message) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	tag, err := parseTag(first(md, mdOrigin))
	if err != nil {
		return nil, s.fail(ctx, outcomeFailed, status.Error(codes.InvalidArgument, err.Error()))
	}
	fp, err := strconv.ParseUint(first(md, mdAuth), 16, 64)
	if err != nil {
		return nil, s.fail(ctx, outcomeFailed, status.Error(codes.InvalidArgument, "zketcd: bad auth fingerprint"))
	}
	var entropy []byte
	if v := md.Get(mdEntropy); len(v) > 0 {
		entropy = []byte(v[0])
	}
	if ctx, err = s.authorize(ctx, k.RPC, req); err != nil {
		return nil, err
	}
	var after int64
	if v := first(md, mdAfter); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			return nil, s.fail(ctx, outcomeFailed, status.Error(codes.InvalidArgument, "zketcd: bad re-send position"))
		}
	}
	// The credential as the origin sent it binds the tag (whether or not
	// this server verified it; authorize checked what it authorizes).
	sent := auth.Caller{Token: first(md, mdCallerToken), CertCN: first(md, mdCallerCN)}
	resp, reply, err := s.target(ctx).l.ServeForward(ctx, engine.ForwardCall{Origin: tag, AuthFP: fp, Caller: sent, Req: req, Entropy: entropy, After: after})
	var final *engine.FinalError
	switch {
	case errors.Is(err, engine.ErrNotLeader):
		return nil, s.fail(ctx, outcomeNotLeader, status.Error(codes.Unavailable, err.Error()))
	case errors.Is(err, engine.ErrAuthChanged):
		return nil, s.fail(ctx, outcomeAuthChanged, status.Error(codes.Unavailable, err.Error()))
	case errors.As(err, &final):
		return nil, s.fail(ctx, outcomeFailed, statusOf(final.Err))
	case err != nil:
		s.lg.WithError(err).WithField("origin", formatTag(tag)).Debug("forwarded request of unknown outcome")
		return nil, statusOf(err)
	case resp != nil && resp.ProtoReflect().Descriptor() != k.NewResponse().ProtoReflect().Descriptor():
		// Never another request's answer (the engine binds tags to their
		// requests, so this is a bug): the origin's outcome stays unknown.
		s.lg.WithFields(logrus.Fields{"origin": formatTag(tag), "method": k.Method}).Errorf("forwarded request answered with a %T", resp)
		return nil, status.Errorf(codes.Internal, "zketcd: internal endpoint: a %s answered with another response", k.Method)
	}
	h := metadata.Pairs(mdLSN, strconv.FormatInt(reply.LSN, 10))
	if reply.Dup {
		h.Set(mdDup, strconv.FormatInt(reply.DupRev, 10))
		resp = &emptypb.Empty{}
	}
	if err := grpc.SetHeader(ctx, h); err != nil {
		return nil, err
	}
	return resp, nil
}

// fail answers err with the outcome trailer.
func (s *server) fail(ctx context.Context, outcome string, err error) error {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(mdOutcome, outcome))
	return err
}

// statusOf is err as a gRPC status: etcd's errors as the client API
// sends them (translate.Status), anything else Unknown (outcome unknown
// for the caller).
func statusOf(err error) error {
	if s, ok := translate.Status(err); ok {
		return s
	}
	return status.Error(codes.Unknown, err.Error())
}
