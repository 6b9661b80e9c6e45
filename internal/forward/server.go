package forward

import (
	"context"
	"crypto/subtle"
	"errors"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/translate"
)

// Leader is what the internal endpoint serves (a *engine.Engine).
type Leader interface {
	ServeForward(ctx context.Context, call engine.ForwardCall) (proto.Message, engine.ForwardReply, error)
	ReadIndex(ctx context.Context) (int64, error)
	ServeKeepAlive(ctx context.Context, id int64) (int64, error)
	ServeLeaseTimeToLive(ctx context.Context, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, int64, error)
	ServeLeases(ctx context.Context) (*pb.LeaseLeasesResponse, int64, error)
	InternalToken() string
}

var _ Leader = (*engine.Engine)(nil)

// NewServer returns the internal gRPC server serving l. Every call must
// present l's token; the server answers PermissionDenied otherwise.
func NewServer(l Leader, lg *logrus.Entry, reg prometheus.Registerer) *grpc.Server {
	s := &server{l: l, lg: lg.WithField("component", "forward-server")}
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(math.MaxInt32), grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	)
	methods := []grpc.MethodDesc{
		{MethodName: methodReadIndex, Handler: s.readIndex},
		{MethodName: methodKeepAlive, Handler: s.keepAlive},
		read(methodLeaseTimeToLive, func(ctx context.Context, l Leader, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, int64, error) {
			return l.ServeLeaseTimeToLive(ctx, req)
		}),
		read(methodLeaseLeases, func(ctx context.Context, l Leader, _ *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, int64, error) {
			return l.ServeLeases(ctx)
		}),
	}
	for _, k := range engine.WriteKinds() {
		methods = append(methods, write(k))
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
	l  Leader
	lg *logrus.Entry
}

// newMessage returns a new empty message of M's type.
func newMessage[M proto.Message]() M {
	var zero M
	return zero.ProtoReflect().New().Interface().(M)
}

// write is the method desc of a forwarded write of kind k.
func write(k engine.WriteKind) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: k.Method, Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		s := srv.(*server)
		req := k.NewRequest()
		if err := dec(req); err != nil {
			return nil, err
		}
		return s.forward(ctx, req)
	}}
}

// read is the method desc of a lease read served at the leader: the
// response, with the position the caller waits for in the mdLSN header, or
// the not-leader outcome.
func read[R, T proto.Message](name string, serve func(context.Context, Leader, R) (T, int64, error)) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		s := srv.(*server)
		req := newMessage[R]()
		if err := dec(req); err != nil {
			return nil, err
		}
		if _, err := s.auth(ctx); err != nil {
			return nil, err
		}
		resp, lsn, err := serve(ctx, s.l, req)
		switch {
		case errors.Is(err, engine.ErrNotLeader):
			return nil, s.fail(ctx, outcomeNotLeader, status.Error(codes.Unavailable, err.Error()))
		case err != nil:
			return nil, statusOf(err)
		}
		if err := grpc.SetHeader(ctx, metadata.Pairs(mdLSN, strconv.FormatInt(lsn, 10))); err != nil {
			return nil, err
		}
		return resp, nil
	}}
}

func (s *server) auth(ctx context.Context) (metadata.MD, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	want := s.l.InternalToken()
	if got := first(md, mdToken); want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return nil, s.fail(ctx, outcomeBadToken, status.Error(codes.PermissionDenied, "zketcd: internal endpoint: bad token"))
	}
	return md, nil
}

func (s *server) forward(ctx context.Context, req proto.Message) (any, error) {
	md, err := s.auth(ctx)
	if err != nil {
		return nil, err
	}
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
	resp, reply, err := s.l.ServeForward(ctx, engine.ForwardCall{Origin: tag, AuthFP: fp, Req: req, Entropy: entropy})
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

func (s *server) readIndex(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	if err := dec(&emptypb.Empty{}); err != nil {
		return nil, err
	}
	if _, err := s.auth(ctx); err != nil {
		return nil, err
	}
	lsn, err := s.l.ReadIndex(ctx)
	if err != nil {
		return nil, statusOf(err)
	}
	return wrapperspb.Int64(lsn), nil
}

func (s *server) keepAlive(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	req := &pb.LeaseKeepAliveRequest{}
	if err := dec(req); err != nil {
		return nil, err
	}
	if _, err := s.auth(ctx); err != nil {
		return nil, err
	}
	ttl, err := s.l.ServeKeepAlive(ctx, req.ID)
	if err != nil {
		return nil, statusOf(err)
	}
	return &pb.LeaseKeepAliveResponse{ID: req.ID, TTL: ttl}, nil
}
