package embed_test

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/etcdformat"
	"github.com/zketcd/zketcd/internal/testutil"
)

// TestKamajiProvisionsAndRemovesATenantThroughEtcdCalls makes, as the
// fleet's administrator (CN root), the calls Kamaji's etcd DataStore
// driver makes (internal/datastore/etcd.go): its existence checks, then
// UserAdd (no password), RoleAdd, RoleGrantPermission on the tenant's
// prefix and UserGrantRole; its migration's copy (a Get of the prefix, a
// Put per key); its delete (RoleDelete, a DeleteRange of the prefix,
// UserDelete). The tenant's apiserver, with CN = the user, sees its own
// cluster; nothing outside a granted prefix reaches any tenant.
func TestKamajiProvisionsAndRemovesATenantThroughEtcdCalls(t *testing.T) {
	fx := newFleetFixture(t, "other")
	f := fx.start("i1", func(c *embed.Config) { c.Tenants.AdminCNs = []string{"root"} })
	ctx := testutil.Context(t, 30*time.Second)
	root := fx.client(f, "root")
	const user, schema = "5f1b9a0e-6c2d-4a8e-9f3b-1c2d3e4f5a6b", "default_tcp1"
	prefix, end := "/"+schema+"/", "/"+schema+"0"

	// UserExists, GrantPrivilegesExists: not found, by etcd's own errors.
	if _, err := root.UserGet(ctx, user); rpctypes.Error(err) != rpctypes.ErrUserNotFound {
		t.Fatalf("UserGet of a new user = %v", err)
	}
	if _, err := root.RoleGet(ctx, schema); rpctypes.Error(err) != rpctypes.ErrRoleNotFound {
		t.Fatalf("RoleGet of a new role = %v", err)
	}
	if _, err := root.UserAddWithOptions(ctx, user, "a-uuid-password", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.RoleAdd(ctx, schema); err != nil {
		t.Fatal(err)
	}
	if _, err := root.RoleGrantPermission(ctx, schema, prefix, end, clientv3.PermissionType(authpb.READWRITE)); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserGrantRole(ctx, user, schema); err != nil {
		t.Fatal(err)
	}
	ug, err := root.UserGet(ctx, user)
	if err != nil || len(ug.Roles) != 1 || ug.Roles[0] != schema {
		t.Fatalf("UserGet after the grant = %v, %v", ug, err)
	}
	rg, err := root.RoleGet(ctx, schema)
	if err != nil || len(rg.Perm) != 1 || string(rg.Perm[0].Key) != prefix || string(rg.Perm[0].RangeEnd) != end {
		t.Fatalf("RoleGet after the grant = %v, %v", rg, err)
	}

	// The tenant's apiserver (CN = the user) writes under its prefix.
	apiserver := fx.client(f, user)
	if _, err := apiserver.Put(ctx, prefix+"pods/a", "pod-a"); err != nil {
		t.Fatal(err)
	}
	// The migration's copy: one Get of the prefix, one Put per key.
	got, err := root.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "pod-a" {
		t.Fatalf("the administrator's Get of the prefix = %v, %v", got, err)
	}
	if _, err := root.Put(ctx, prefix+"pods/b", "pod-b"); err != nil {
		t.Fatal(err)
	}
	if g, err := apiserver.Get(ctx, prefix+"pods/b"); err != nil || len(g.Kvs) != 1 {
		t.Fatalf("the tenant does not see the administrator's put: %v %v", g, err)
	}
	// Nothing outside a granted range reaches a tenant.
	for name, call := range map[string]func() error{
		"Get outside":    func() error { _, err := root.Get(ctx, "/registry/", clientv3.WithPrefix()); return err },
		"Get everything": func() error { _, err := root.Get(ctx, "", clientv3.WithFromKey()); return err },
		"Put outside":    func() error { _, err := root.Put(ctx, "/other/x", "v"); return err },
		"Txn across": func() error {
			_, err := root.Txn(ctx).Then(clientv3.OpPut(prefix+"x", "1"), clientv3.OpPut("/elsewhere", "1")).Commit()
			return err
		},
		"Compact":    func() error { _, err := root.Compact(ctx, 2); return err },
		"LeaseGrant": func() error { _, err := root.Grant(ctx, 60); return err },
		"Status":     func() error { _, err := root.Status(ctx, f.ClientAddrs()[0]); return err },
	} {
		if err := call(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("%s as the administrator: %v, want permission denied", name, err)
		}
	}

	// The delete: RoleDelete, then the prefix's keys, then the user.
	if _, err := root.RoleDelete(ctx, schema); err != nil {
		t.Fatal(err)
	}
	if d, err := root.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil || d.Deleted != 2 {
		t.Fatalf("the prefix's delete after the role's = %v, %v", d, err)
	}
	if _, err := root.UserDelete(ctx, user); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the tenant's record gone", func() bool {
		_, err := fx.reg.Tenant(user)
		return err != nil
	})
	if _, err := root.UserGet(ctx, user); rpctypes.Error(err) != rpctypes.ErrUserNotFound {
		t.Fatalf("UserGet after the delete = %v", err)
	}
}

// TestFleetAdminHTTPAPI: create, read, change limits, snapshot and delete
// a tenant over HTTP as the administrator; a tenant's certificate gets
// nothing of it.
func TestFleetAdminHTTPAPI(t *testing.T) {
	fx := newFleetFixture(t)
	f := fx.start("i1", nil)
	httpc := func(cn string) *http.Client {
		cfg := fx.certs.ClientTLS(t, false)
		cfg.Certificates = []tls.Certificate{fx.certs.ClientWithSubject(t, pkix.Name{CommonName: cn})}
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	admin := httpc("fleet-admin")
	base := "https://" + f.ClientAddrs()[0] + "/zketcd/v1/tenants"
	do := func(c *http.Client, method, url, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do(admin, "POST", base, `{"name":"web","limits":{"max_leases":5}}`); code != http.StatusBadRequest {
		t.Fatalf("an unknown limit: %d %s", code, body)
	}
	if code, body := do(admin, "POST", base, `{"name":"web","limits":{"leases":5}}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, _ := do(admin, "POST", base, `{"name":"web"}`); code != http.StatusConflict {
		t.Fatalf("create twice: %d", code)
	}
	if code, body := do(admin, "PUT", base+"/web/limits", `{"requests_per_second":100}`); code != http.StatusOK || !strings.Contains(body, `"requests_per_second":100`) {
		t.Fatalf("limits: %d %s", code, body)
	}
	code, body := do(admin, "GET", base, "")
	var list struct{ Tenants []struct{ Name string } }
	if code != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil || len(list.Tenants) != 1 {
		t.Fatalf("list: %d %s", code, body)
	}
	// The tenant writes; the administrator's snapshot holds it.
	ctx := testutil.Context(t, 30*time.Second)
	if _, err := fx.client(f, "web").Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := admin.Get(base + "/web/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "web.db")
	out, _ := os.Create(file)
	io.Copy(out, resp.Body)
	out.Close()
	resp.Body.Close()
	snap, _, err := etcdformat.ReadFile(file, etcdformat.ReadOptions{})
	if err != nil || snap.State.Rev != 2 || snap.Len() != 1 {
		t.Fatalf("the snapshot over HTTP: %v, %v", snap, err)
	}
	// A tenant's certificate reaches no administration.
	if code, _ := do(httpc("web"), "GET", base, ""); code == http.StatusOK {
		t.Fatal("a tenant listed the tenants")
	}
	if code, body := do(admin, "DELETE", base+"/web", ""); code != http.StatusAccepted {
		t.Fatalf("delete: %d %s", code, body)
	}
	testutil.Eventually(t, 30*time.Second, "the tenant deleted", func() bool {
		code, _ := do(admin, "GET", base+"/web", "")
		return code == http.StatusNotFound
	})
}
