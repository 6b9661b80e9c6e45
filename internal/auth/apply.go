package auth

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// errNoPasswordUser is etcd's answer (it has no rpctypes form, so etcd sends
// it as Unknown) when a password is given for a user without one.
var errNoPasswordUser = status.Error(codes.Unknown, "auth: authentication failed, password was given for no password user")

// Apply evaluates one changing Auth request against s and returns the next
// state (s itself when nothing changes, e.g. granting a role already
// granted) and the response, without its header. Passwords must already be
// hashed: UserAdd and UserChangePassword carry the base64 bcrypt hash in
// HashedPassword (see Store.Prepare), so that what goes into the log never
// holds a password. Errors are etcd's rpctypes errors. entropy is random
// bytes chosen once per request before it enters the log (the same on
// every evaluation): AuthEnable takes it as the new simple-token secret.
func (s *State) Apply(req proto.Message, entropy []byte) (*State, proto.Message, error) {
	switch r := req.(type) {
	case *pb.AuthEnableRequest:
		return s.authEnable(entropy)
	case *pb.AuthDisableRequest:
		if !s.Enabled {
			return s, &pb.AuthDisableResponse{}, nil
		}
		n := s.clone()
		n.Enabled = false
		n.secret = nil
		n.Revision++
		return n, &pb.AuthDisableResponse{}, nil
	case *pb.AuthUserAddRequest:
		return s.userAdd(r)
	case *pb.AuthUserDeleteRequest:
		return s.userDelete(r)
	case *pb.AuthUserChangePasswordRequest:
		return s.userChangePassword(r)
	case *pb.AuthUserGrantRoleRequest:
		return s.userGrantRole(r)
	case *pb.AuthUserRevokeRoleRequest:
		return s.userRevokeRole(r)
	case *pb.AuthRoleAddRequest:
		return s.roleAdd(r)
	case *pb.AuthRoleDeleteRequest:
		return s.roleDelete(r)
	case *pb.AuthRoleGrantPermissionRequest:
		return s.roleGrantPermission(r)
	case *pb.AuthRoleRevokePermissionRequest:
		return s.roleRevokePermission(r)
	}
	return nil, nil, fmt.Errorf("auth: %T is not a changing request", req)
}

func (s *State) authEnable(entropy []byte) (*State, proto.Message, error) {
	if s.Enabled {
		return s, &pb.AuthEnableResponse{}, nil
	}
	u := s.users[RootUser]
	if u == nil {
		return nil, nil, rpctypes.ErrGRPCRootUserNotExist
	}
	if !slices.Contains(u.Roles, RootRole) {
		return nil, nil, rpctypes.ErrGRPCRootRoleNotExist
	}
	if len(entropy) < 16 {
		return nil, nil, fmt.Errorf("auth: AuthEnable needs at least 16 bytes of entropy, got %d", len(entropy))
	}
	n := s.clone()
	n.Enabled = true // etcd does not change the auth revision here
	n.secret = append([]byte(nil), entropy...)
	return n, &pb.AuthEnableResponse{}, nil
}

// password decodes a stored form of a password from a request.
func password(hashed string) ([]byte, error) {
	p, err := base64.StdEncoding.DecodeString(hashed)
	if err != nil {
		return nil, errNoPasswordUser
	}
	return p, nil
}

func (s *State) putUser(u *authpb.User) *State {
	n := s.clone()
	n.users[string(u.Name)] = u
	n.Revision++
	return n
}

func (s *State) userAdd(r *pb.AuthUserAddRequest) (*State, proto.Message, error) {
	if r.Name == "" {
		return nil, nil, rpctypes.ErrGRPCUserEmpty
	}
	if s.users[r.Name] != nil {
		return nil, nil, rpctypes.ErrGRPCUserAlreadyExist
	}
	opts := &authpb.UserAddOptions{}
	if r.Options != nil {
		opts.NoPassword = r.Options.NoPassword
	}
	u := &authpb.User{Name: []byte(r.Name), Options: opts}
	if !opts.NoPassword {
		p, err := password(r.HashedPassword)
		if err != nil {
			return nil, nil, err
		}
		u.Password = p
	}
	return s.putUser(u), &pb.AuthUserAddResponse{}, nil
}

func (s *State) userDelete(r *pb.AuthUserDeleteRequest) (*State, proto.Message, error) {
	if s.Enabled && r.Name == RootUser {
		return nil, nil, rpctypes.ErrGRPCInvalidAuthMgmt
	}
	if s.users[r.Name] == nil {
		return nil, nil, rpctypes.ErrGRPCUserNotFound
	}
	n := s.clone()
	delete(n.users, r.Name)
	n.Revision++
	return n, &pb.AuthUserDeleteResponse{}, nil
}

func (s *State) userChangePassword(r *pb.AuthUserChangePasswordRequest) (*State, proto.Message, error) {
	u := s.users[r.Name]
	if u == nil {
		return nil, nil, rpctypes.ErrGRPCUserNotFound
	}
	nu := &authpb.User{Name: u.Name, Roles: u.Roles, Options: u.Options}
	if u.Options == nil || !u.Options.NoPassword {
		p, err := password(r.HashedPassword)
		if err != nil {
			return nil, nil, err
		}
		nu.Password = p
	}
	return s.putUser(nu), &pb.AuthUserChangePasswordResponse{}, nil
}

func (s *State) userGrantRole(r *pb.AuthUserGrantRoleRequest) (*State, proto.Message, error) {
	u := s.users[r.User]
	if u == nil {
		return nil, nil, rpctypes.ErrGRPCUserNotFound
	}
	// As etcd: the root role may be granted before it is created.
	if r.Role != RootRole && s.roles[r.Role] == nil {
		return nil, nil, rpctypes.ErrGRPCRoleNotFound
	}
	if _, found := slices.BinarySearch(u.Roles, r.Role); found {
		return s, &pb.AuthUserGrantRoleResponse{}, nil
	}
	roles := append(slices.Clone(u.Roles), r.Role)
	sort.Strings(roles)
	return s.putUser(&authpb.User{Name: u.Name, Password: u.Password, Options: u.Options, Roles: roles}),
		&pb.AuthUserGrantRoleResponse{}, nil
}

func (s *State) userRevokeRole(r *pb.AuthUserRevokeRoleRequest) (*State, proto.Message, error) {
	if s.Enabled && r.Name == RootUser && r.Role == RootRole {
		return nil, nil, rpctypes.ErrGRPCInvalidAuthMgmt
	}
	u := s.users[r.Name]
	if u == nil {
		return nil, nil, rpctypes.ErrGRPCUserNotFound
	}
	roles := slices.DeleteFunc(slices.Clone(u.Roles), func(x string) bool { return x == r.Role })
	if len(roles) == len(u.Roles) {
		return nil, nil, rpctypes.ErrGRPCRoleNotGranted
	}
	return s.putUser(&authpb.User{Name: u.Name, Password: u.Password, Options: u.Options, Roles: roles}),
		&pb.AuthUserRevokeRoleResponse{}, nil
}

func (s *State) putRole(ro *authpb.Role) *State {
	n := s.clone()
	n.roles[string(ro.Name)] = ro
	n.Revision++
	return n
}

func (s *State) roleAdd(r *pb.AuthRoleAddRequest) (*State, proto.Message, error) {
	if r.Name == "" {
		return nil, nil, rpctypes.ErrGRPCRoleEmpty
	}
	if s.roles[r.Name] != nil {
		return nil, nil, rpctypes.ErrGRPCRoleAlreadyExist
	}
	return s.putRole(&authpb.Role{Name: []byte(r.Name)}), &pb.AuthRoleAddResponse{}, nil
}

func (s *State) roleDelete(r *pb.AuthRoleDeleteRequest) (*State, proto.Message, error) {
	if s.Enabled && r.Role == RootRole {
		return nil, nil, rpctypes.ErrGRPCInvalidAuthMgmt
	}
	if s.roles[r.Role] == nil {
		return nil, nil, rpctypes.ErrGRPCRoleNotFound
	}
	n := s.clone()
	delete(n.roles, r.Role)
	for name, u := range n.users {
		if !slices.Contains(u.Roles, r.Role) {
			continue
		}
		roles := slices.DeleteFunc(slices.Clone(u.Roles), func(x string) bool { return x == r.Role })
		n.users[name] = &authpb.User{Name: u.Name, Password: u.Password, Options: u.Options, Roles: roles}
	}
	n.Revision++
	return n, &pb.AuthRoleDeleteResponse{}, nil
}

// validPermRange is etcd's rule for a permission's range: a non-empty key,
// and a range end that is empty (one key), after the key, or "\x00" (every
// key from key on).
func validPermRange(key, end []byte) bool {
	if len(key) == 0 {
		return false
	}
	if len(end) == 0 || isOpenEnded(end) {
		return true
	}
	return bytes.Compare(key, end) < 0
}

func isOpenEnded(end []byte) bool { return len(end) == 1 && end[0] == 0 }

func (s *State) roleGrantPermission(r *pb.AuthRoleGrantPermissionRequest) (*State, proto.Message, error) {
	if r.Perm == nil {
		return nil, nil, rpctypes.ErrGRPCPermissionNotGiven
	}
	if !validPermRange(r.Perm.Key, r.Perm.RangeEnd) {
		return nil, nil, rpctypes.ErrGRPCInvalidAuthMgmt
	}
	ro := s.roles[r.Name]
	if ro == nil {
		return nil, nil, rpctypes.ErrGRPCRoleNotFound
	}
	perms := make([]*authpb.Permission, 0, len(ro.KeyPermission)+1)
	replaced := false
	for _, p := range ro.KeyPermission {
		if !replaced && bytes.Equal(p.Key, r.Perm.Key) && bytes.Equal(p.RangeEnd, r.Perm.RangeEnd) {
			p = &authpb.Permission{Key: p.Key, RangeEnd: p.RangeEnd, PermType: r.Perm.PermType}
			replaced = true
		}
		perms = append(perms, p)
	}
	if !replaced {
		perms = append(perms, &authpb.Permission{Key: r.Perm.Key, RangeEnd: r.Perm.RangeEnd, PermType: r.Perm.PermType})
		sort.SliceStable(perms, func(i, j int) bool { return bytes.Compare(perms[i].Key, perms[j].Key) < 0 })
	}
	return s.putRole(&authpb.Role{Name: ro.Name, KeyPermission: perms}), &pb.AuthRoleGrantPermissionResponse{}, nil
}

func (s *State) roleRevokePermission(r *pb.AuthRoleRevokePermissionRequest) (*State, proto.Message, error) {
	ro := s.roles[r.Role]
	if ro == nil {
		return nil, nil, rpctypes.ErrGRPCRoleNotFound
	}
	perms := slices.DeleteFunc(slices.Clone(ro.KeyPermission), func(p *authpb.Permission) bool {
		return bytes.Equal(p.Key, r.Key) && bytes.Equal(p.RangeEnd, r.RangeEnd)
	})
	if len(perms) == len(ro.KeyPermission) {
		return nil, nil, rpctypes.ErrGRPCPermissionNotGranted
	}
	return s.putRole(&authpb.Role{Name: ro.Name, KeyPermission: perms}), &pb.AuthRoleRevokePermissionResponse{}, nil
}
