package fleetadmin

import (
	"context"
	"errors"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/internal/tenant"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// authServer is etcd's Auth service over the registry: users are tenants
// (served to the certificate CN of their name), roles are the registry's.
// Authentication is by certificate only, so it is always on.
type authServer struct {
	pb.UnimplementedAuthServer
	f Fleet
}

// casRetries bounds the retries of a registry change that raced another.
const casRetries = 16

var errNoPasswords = status.Error(codes.FailedPrecondition, "zketcd: the fleet's administration authenticates by client certificate only")

func (a *authServer) AuthEnable(context.Context, *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return &pb.AuthEnableResponse{Header: header()}, nil
}

func (a *authServer) AuthDisable(context.Context, *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	return nil, status.Error(codes.FailedPrecondition, "zketcd: the fleet's administration cannot disable authentication (connections are bound by certificate)")
}

func (a *authServer) AuthStatus(context.Context, *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	return &pb.AuthStatusResponse{Header: header(), Enabled: true}, nil
}

func (a *authServer) Authenticate(context.Context, *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	return nil, errNoPasswords
}

func (a *authServer) UserChangePassword(context.Context, *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	return nil, errNoPasswords
}

// UserAdd creates a tenant of the user's name, served to the certificate
// CN of that name. The password, if any, is not kept: a tenant's clients
// are known by their certificates.
func (a *authServer) UserAdd(_ context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	if r.Name == "" {
		return nil, rpctypes.ErrGRPCUserEmpty
	}
	if err := tenant.ValidName(r.Name); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	_, err := a.f.TenantRegistry().CreateTenant(zkstore.TenantRecord{Name: r.Name, CNs: []string{r.Name}})
	if err != nil {
		return nil, registryErr(err)
	}
	return &pb.AuthUserAddResponse{Header: header()}, nil
}

func (a *authServer) UserGet(_ context.Context, r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	rec, err := a.f.TenantRegistry().Tenant(r.Name)
	if err != nil {
		return nil, registryErr(err)
	}
	if rec.State != zkstore.TenantActive {
		return nil, rpctypes.ErrGRPCUserNotFound
	}
	return &pb.AuthUserGetResponse{Header: header(), Roles: slices.Clone(rec.Roles)}, nil
}

func (a *authServer) UserList(context.Context, *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	recs, _, _, err := a.f.TenantRegistry().Tenants(false)
	if err != nil {
		return nil, registryErr(err)
	}
	resp := &pb.AuthUserListResponse{Header: header()}
	for _, r := range recs {
		if r.State == zkstore.TenantActive {
			resp.Users = append(resp.Users, r.Name)
		}
	}
	return resp, nil
}

// UserDelete deletes the tenant: its engines stop everywhere and its
// znodes are deleted once none serves it.
func (a *authServer) UserDelete(_ context.Context, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	if _, err := a.f.TenantRegistry().Tenant(r.Name); err != nil {
		return nil, registryErr(err)
	}
	if err := a.f.Delete(r.Name); err != nil {
		return nil, registryErr(err)
	}
	return &pb.AuthUserDeleteResponse{Header: header()}, nil
}

func (a *authServer) UserGrantRole(_ context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	reg := a.f.TenantRegistry()
	if _, err := reg.GetRole(r.Role); err != nil {
		return nil, registryErr(err)
	}
	err := a.changeRoles(r.User, func(roles []string) ([]string, error) {
		if slices.Contains(roles, r.Role) {
			return nil, nil // granted already: etcd answers success
		}
		return append(roles, r.Role), nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.AuthUserGrantRoleResponse{Header: header()}, nil
}

func (a *authServer) UserRevokeRole(_ context.Context, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	err := a.changeRoles(r.Name, func(roles []string) ([]string, error) {
		i := slices.Index(roles, r.Role)
		if i < 0 {
			return nil, rpctypes.ErrGRPCRoleNotGranted
		}
		return slices.Delete(slices.Clone(roles), i, i+1), nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.AuthUserRevokeRoleResponse{Header: header()}, nil
}

// changeRoles rewrites a tenant's roles with change (nil roles and nil
// error: nothing to write), retrying a race with another change.
func (a *authServer) changeRoles(user string, change func([]string) ([]string, error)) error {
	return a.changeTenant(user, func(rec *zkstore.TenantRecord) (bool, error) {
		roles, err := change(rec.Roles)
		if err != nil || roles == nil {
			return false, err
		}
		rec.Roles = roles
		return true, nil
	})
}

// changeTenant rewrites a tenant's roles and ranges with change (false:
// nothing to write), retrying a race with another change.
func (a *authServer) changeTenant(user string, change func(*zkstore.TenantRecord) (bool, error)) error {
	reg := a.f.TenantRegistry()
	for range casRetries {
		rec, err := reg.Tenant(user)
		if err != nil {
			return registryErr(err)
		}
		write, err := change(&rec)
		if err != nil || !write {
			return err
		}
		if _, err := reg.UpdateTenant(rec); err == nil {
			return nil
		} else if errors.Is(err, zkstore.ErrTenantNotFound) {
			return rpctypes.ErrGRPCUserNotFound
		}
	}
	return rpctypes.ErrGRPCTimeout
}

func (a *authServer) RoleAdd(_ context.Context, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	if r.Name == "" {
		return nil, rpctypes.ErrGRPCRoleEmpty
	}
	if err := tenant.ValidName(r.Name); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := a.f.TenantRegistry().CreateRole(r.Name, roleData{}.encode()); err != nil {
		return nil, registryErr(err)
	}
	return &pb.AuthRoleAddResponse{Header: header()}, nil
}

func (a *authServer) RoleGet(_ context.Context, r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	role, err := a.f.TenantRegistry().GetRole(r.Role)
	if err != nil {
		return nil, registryErr(err)
	}
	d, err := decodeRole(role.Data)
	if err != nil {
		return nil, rpctypes.ErrGRPCRoleNotFound
	}
	return &pb.AuthRoleGetResponse{Header: header(), Perm: d.authpb()}, nil
}

func (a *authServer) RoleList(context.Context, *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	names, err := a.f.TenantRegistry().RoleNames()
	if err != nil {
		return nil, registryErr(err)
	}
	return &pb.AuthRoleListResponse{Header: header(), Roles: names}, nil
}

// RoleDelete deletes the role and revokes it from every tenant granted it.
// The key ranges it granted stay mapped to those tenants (a platform
// deletes a cluster's role, then its keys, then its user).
func (a *authServer) RoleDelete(_ context.Context, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	reg := a.f.TenantRegistry()
	role, err := reg.GetRole(r.Role)
	if err != nil {
		return nil, registryErr(err)
	}
	d, err := decodeRole(role.Data)
	if err != nil {
		return nil, rpctypes.ErrGRPCRoleNotFound
	}
	recs, _, _, err := reg.Tenants(false)
	if err != nil {
		return nil, registryErr(err)
	}
	for _, rec := range recs {
		if !slices.Contains(rec.Roles, r.Role) {
			continue
		}
		err := a.changeTenant(rec.Name, func(rec *zkstore.TenantRecord) (bool, error) {
			i := slices.Index(rec.Roles, r.Role)
			if i < 0 {
				return false, nil
			}
			kept, _ := decodeRanges(rec.Ranges)
			kept.Perms = append(kept.Perms, d.Perms...)
			rec.Roles, rec.Ranges = slices.Delete(slices.Clone(rec.Roles), i, i+1), kept.encode()
			return true, nil
		})
		if err != nil && !errors.Is(err, rpctypes.ErrGRPCUserNotFound) {
			return nil, err
		}
	}
	if err := reg.DeleteRole(r.Role); err != nil {
		return nil, registryErr(err)
	}
	return &pb.AuthRoleDeleteResponse{Header: header()}, nil
}

func (a *authServer) RoleGrantPermission(_ context.Context, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	if r.Perm == nil {
		return nil, rpctypes.ErrGRPCPermissionNotGiven
	}
	if len(r.Perm.Key) == 0 {
		return nil, status.Error(codes.InvalidArgument, "etcdserver: key is not provided")
	}
	err := a.changeRole(r.Name, func(d *roleData) error {
		d.grant(perm{Type: r.Perm.PermType, Key: r.Perm.Key, RangeEnd: r.Perm.RangeEnd})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.AuthRoleGrantPermissionResponse{Header: header()}, nil
}

func (a *authServer) RoleRevokePermission(_ context.Context, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	err := a.changeRole(r.Role, func(d *roleData) error {
		if !d.revoke(r.Key, r.RangeEnd) {
			return rpctypes.ErrGRPCPermissionNotGranted
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.AuthRoleRevokePermissionResponse{Header: header()}, nil
}

// changeRole rewrites a role's permissions with change, retrying a race.
func (a *authServer) changeRole(name string, change func(*roleData) error) error {
	reg := a.f.TenantRegistry()
	for range casRetries {
		role, err := reg.GetRole(name)
		if err != nil {
			return registryErr(err)
		}
		d, err := decodeRole(role.Data)
		if err != nil {
			return rpctypes.ErrGRPCRoleNotFound
		}
		if err := change(&d); err != nil {
			return err
		}
		role.Data = d.encode()
		if err := reg.SetRole(role); err == nil {
			return nil
		} else if errors.Is(err, zkstore.ErrRoleNotFound) {
			return rpctypes.ErrGRPCRoleNotFound
		}
	}
	return rpctypes.ErrGRPCTimeout
}

// permsOf is every permission granted to a tenant through its roles, and
// the ranges kept from roles deleted.
func permsOf(reg *zkstore.Registry, rec zkstore.TenantRecord) ([]perm, error) {
	kept, _ := decodeRanges(rec.Ranges)
	out := kept.Perms
	for _, name := range rec.Roles {
		role, err := reg.GetRole(name)
		if errors.Is(err, zkstore.ErrRoleNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		d, err := decodeRole(role.Data)
		if err != nil {
			continue
		}
		out = append(out, d.Perms...)
	}
	return out, nil
}
