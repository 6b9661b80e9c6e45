package grpcsrv

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/zketcd/zketcd/internal/auth"
)

// Auth is what the Auth service and the authorizer need from the engine.
type Auth interface {
	// AuthState returns the encoded auth state of the view (package auth's
	// encoding; nil if it never changed) and the log position it was read
	// at.
	AuthState() ([]byte, int64)
	// AuthWrite commits an auth change (req as Store.Prepare made it, with
	// entropy drawn once for it) through the log, in order with every
	// other write, and returns Apply's response; once it returns without
	// error the change is applied to this instance's view.
	AuthWrite(ctx context.Context, req proto.Message, entropy []byte) (proto.Message, error)
	// Linearize waits until the view holds every write acknowledged
	// before the call.
	Linearize(ctx context.Context) error
	// LeaseKeys returns the keys attached to a lease, sorted, and whether
	// the lease exists.
	LeaseKeys(id int64) (keys [][]byte, ok bool)
	// LeaseIDs returns the ID of every lease, ascending.
	LeaseIDs() []int64
	// CanEnableAuth returns nil, or the gRPC status error AuthEnable
	// answers instead of enabling authentication (the root's ZooKeeper
	// data is world-readable).
	CanEnableAuth() error
}

// authServer answers etcd's Auth service from the auth store. Changes go
// through the revision log (Auth.AuthWrite) so that every instance
// applies them at the same position; reads and Authenticate first catch
// up with the log, as etcd's go through raft. Permission checks are the
// authorizer's (auth.Rules, in the interceptor), done before a request
// reaches here.
type authServer struct {
	pb.UnsafeAuthServer
	st        *auth.Store
	hdr       header
	lg        *logrus.Entry
	write     func(ctx context.Context, req proto.Message, entropy []byte) (proto.Message, error)
	linearize func(ctx context.Context) error
	canEnable func() error
	// localSecret: tokens are signed with a secret outside ZooKeeper.
	localSecret bool
	// guesses bounds failed Authenticate calls per user (authlimit.go).
	guesses *authLimiter
	// checks bounds the password checks running at once (bcrypt, ~50 ms
	// of a core each) to the cores the process may use.
	checks chan struct{}
}

var _ pb.AuthServer = (*authServer)(nil)

// withHeader fills the header field of an Auth response.
func (s *authServer) withHeader(m proto.Message) proto.Message {
	h := &pb.ResponseHeader{}
	s.hdr.fill(h)
	r := m.ProtoReflect()
	r.Set(r.Descriptor().Fields().ByName("header"), protoreflect.ValueOfMessage(h.ProtoReflect()))
	return m
}

// change commits one changing request.
func (s *authServer) change(ctx context.Context, req proto.Message) (proto.Message, error) {
	prepared, err := s.st.Prepare(req)
	if err != nil {
		return nil, err
	}
	// Drawn once, so that every evaluation of the request (another instance
	// may take the log position first) sees the same bytes.
	entropy := make([]byte, 32)
	if _, err := rand.Read(entropy); err != nil {
		return nil, toGRPCError(s.lg, fmt.Errorf("auth entropy: %w", err))
	}
	resp, err := s.write(ctx, prepared, entropy)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	return s.withHeader(resp), nil
}

// read answers a read-only request after catching up with the log.
func (s *authServer) read(ctx context.Context, req proto.Message) (proto.Message, error) {
	if err := s.linearize(ctx); err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	resp, err := s.st.Read(req)
	if err != nil {
		return nil, err
	}
	return s.withHeader(resp), nil
}

// Authenticate checks a password after catching up with the log (so that
// a user just created through another instance can log in) and returns a
// token. With auth off it answers "authentication is not enabled", which
// clientv3 takes as "carry on without a token".
//
// No attempt is refused for the failures of others: a password check
// waits for one of the bcrypt slots (s.checks), unless the password
// succeeded before (auth.Store.Remembered), and the answer to a failure
// beyond its user's allowance is held back (authlimit.go), which slows
// guessing without locking the user out.
func (s *authServer) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	if err := s.linearize(ctx); err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	slot := !s.st.Remembered(r.Name, r.Password)
	if slot {
		select {
		case s.checks <- struct{}{}:
		case <-ctx.Done():
			return nil, toGRPCError(s.lg, ctx.Err())
		}
	}
	resp, err := s.st.Authenticate(r.Name, r.Password)
	if slot {
		<-s.checks // not held while a failure's answer waits
	}
	if errors.Is(err, rpctypes.ErrGRPCAuthFailed) {
		if wait := s.guesses.failure(r.Name); wait > 0 {
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
	}
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	return s.withHeader(resp).(*pb.AuthenticateResponse), nil
}

func (s *authServer) AuthEnable(ctx context.Context, r *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	if err := s.canEnable(); err != nil {
		s.lg.WithError(err).Warn("AuthEnable refused")
		return nil, err
	}
	m, err := s.change(ctx, r)
	if err != nil {
		return nil, err
	}
	if !s.localSecret {
		s.lg.Warn(simpleSecretWarning)
	}
	return m.(*pb.AuthEnableResponse), nil
}

func (s *authServer) AuthDisable(ctx context.Context, r *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	m, err := s.change(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthDisableResponse), nil
}

func (s *authServer) AuthStatus(ctx context.Context, r *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	m, err := s.read(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthStatusResponse), nil
}

func (s *authServer) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	m, err := s.change(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthUserAddResponse), nil
}

func (s *authServer) UserGet(ctx context.Context, r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	m, err := s.read(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthUserGetResponse), nil
}

func (s *authServer) UserList(ctx context.Context, r *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	m, err := s.read(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthUserListResponse), nil
}

func (s *authServer) UserDelete(ctx context.Context, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	m, err := s.change(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthUserDeleteResponse), nil
}

func (s *authServer) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	m, err := s.change(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthUserChangePasswordResponse), nil
}

func (s *authServer) UserGrantRole(ctx context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	m, err := s.change(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthUserGrantRoleResponse), nil
}

func (s *authServer) UserRevokeRole(ctx context.Context, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	m, err := s.change(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthUserRevokeRoleResponse), nil
}

func (s *authServer) RoleAdd(ctx context.Context, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	m, err := s.change(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthRoleAddResponse), nil
}

func (s *authServer) RoleGet(ctx context.Context, r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	m, err := s.read(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthRoleGetResponse), nil
}

func (s *authServer) RoleList(ctx context.Context, r *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	m, err := s.read(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthRoleListResponse), nil
}

func (s *authServer) RoleDelete(ctx context.Context, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	m, err := s.change(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthRoleDeleteResponse), nil
}

func (s *authServer) RoleGrantPermission(ctx context.Context, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	m, err := s.change(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthRoleGrantPermissionResponse), nil
}

func (s *authServer) RoleRevokePermission(ctx context.Context, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	m, err := s.change(ctx, r)
	if err != nil {
		return nil, err
	}
	return m.(*pb.AuthRoleRevokePermissionResponse), nil
}
