package grpcsrv

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Admission admits a tenant's calls before they run (Config.Admission;
// *tenant.Admission implements it). Both methods return nil or etcd's
// error refusing the call ("too many requests"); Admit may wait for room,
// until ctx ends.
type Admission interface {
	// Admit admits one request that writes writeBytes (0: a read).
	Admit(ctx context.Context, writeBytes int) error
	// AdmitLease admits a lease grant (the tenant's lease limit).
	AdmitLease() error
}

// writeMethods are the calls whose request counts against a tenant's
// bytes written: every call that changes the cluster's state.
var writeMethods = map[string]bool{
	"/etcdserverpb.KV/Put": true, "/etcdserverpb.KV/DeleteRange": true, "/etcdserverpb.KV/Txn": true, "/etcdserverpb.KV/Compact": true,
	"/etcdserverpb.Lease/LeaseGrant": true, "/etcdserverpb.Lease/LeaseRevoke": true,
	"/etcdserverpb.Maintenance/Alarm": true, "/etcdserverpb.Maintenance/Defragment": true,
}

// readOnlyAuth are the Auth service's calls that change nothing.
var readOnlyAuth = map[string]bool{
	"Authenticate": true, "AuthStatus": true, "UserGet": true, "UserList": true, "RoleGet": true, "RoleList": true,
}

// isWrite reports whether method changes state.
func isWrite(method string) bool {
	if writeMethods[method] {
		return true
	}
	name, ok := strings.CutPrefix(method, "/etcdserverpb.Auth/")
	return ok && !readOnlyAuth[name]
}

// admitter applies an Admission to unary calls (one request each, its
// size the bytes it writes) and to every message a stream receives (watch
// requests, keepalives: reads). The health service is exempt.
type admitter struct{ a Admission }

func (ad admitter) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, healthService) {
		return handler(ctx, req)
	}
	n := 0
	if isWrite(info.FullMethod) {
		if m, ok := req.(proto.Message); ok {
			n = max(proto.Size(m), 1)
		}
	}
	if err := ad.a.Admit(ctx, n); err != nil {
		return nil, err
	}
	if info.FullMethod == "/etcdserverpb.Lease/LeaseGrant" {
		if err := ad.a.AdmitLease(); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

func (ad admitter) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if strings.HasPrefix(info.FullMethod, healthService) {
		return handler(srv, ss)
	}
	return handler(srv, &admittedStream{ServerStream: ss, a: ad.a})
}

// admittedStream admits each message it receives; a refusal ends the
// stream with the refusal's error.
type admittedStream struct {
	grpc.ServerStream
	a Admission
}

func (s *admittedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.a.Admit(s.Context(), 0)
}
