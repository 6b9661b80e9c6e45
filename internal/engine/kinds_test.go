package engine

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// TestEveryForwardedWriteKeepsItsMethodAndLabel: the method names are the
// internal endpoint's protocol (an instance of an older build calls and
// serves these) and the labels those of the forwarding metrics; each kind
// is found again from its request, and answers with a response of its own.
func TestEveryForwardedWriteKeepsItsMethodAndLabel(t *testing.T) {
	want := map[string]string{
		"Put": "put", "DeleteRange": "delete_range", "Txn": "txn", "Compact": "compaction",
		"LeaseGrant": "lease_grant", "LeaseRevoke": "lease_revoke", "Alarm": "alarm",
		"AuthEnable": "auth", "AuthDisable": "auth", "UserAdd": "auth", "UserDelete": "auth",
		"UserChangePassword": "auth", "UserGrantRole": "auth", "UserRevokeRole": "auth",
		"RoleAdd": "auth", "RoleDelete": "auth", "RoleGrantPermission": "auth", "RoleRevokePermission": "auth",
	}
	got := map[string]string{}
	requests := map[reflect.Type]bool{}
	for _, k := range WriteKinds() {
		if _, dup := got[k.Method]; dup {
			t.Errorf("method %s twice", k.Method)
		}
		got[k.Method] = k.Label
		req, resp := k.NewRequest(), k.NewResponse()
		if requests[reflect.TypeOf(req)] {
			t.Errorf("%s: request %T of another kind too", k.Method, req)
		}
		requests[reflect.TypeOf(req)] = true
		if again, ok := WriteKindOf(req); !ok || again.Method != k.Method {
			t.Errorf("%s: the kind of %T is %q (%v)", k.Method, req, again.Method, ok)
		}
		if name := strings.TrimSuffix(string(proto.MessageName(req)), "Request") + "Response"; string(proto.MessageName(resp)) != name {
			t.Errorf("%s: %T answered with %T", k.Method, req, resp)
		}
		if err := isEtcdMethodOf(k.RPC, req); err != nil {
			t.Errorf("%s: %v", k.Method, err)
		}
		if kindLabel(req) != k.Label {
			t.Errorf("%s: label %q, want %q", k.Method, kindLabel(req), k.Label)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
	if _, ok := WriteKindOf(&pb.RangeRequest{}); ok {
		t.Error("a request of no kind has one")
	}
}

// isEtcdMethodOf checks that rpc ("/etcdserverpb.KV/Put") is a method of
// etcd's API taking req's type.
func isEtcdMethodOf(rpc string, req proto.Message) error {
	svc, method, ok := strings.Cut(strings.TrimPrefix(rpc, "/"), "/")
	if !ok {
		return fmt.Errorf("RPC %q is not /service/method", rpc)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return fmt.Errorf("RPC %q: %w", rpc, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return fmt.Errorf("RPC %q: %s is not a service", rpc, svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return fmt.Errorf("RPC %q: no such method", rpc)
	}
	if md.Input().FullName() != proto.MessageName(req) {
		return fmt.Errorf("RPC %q takes %s, not %s", rpc, md.Input().FullName(), proto.MessageName(req))
	}
	return nil
}
