package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/etcdformat"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// TestTenantCommandsAdministerAFleet: create (with its own CN and a
// limit), list, limits, a snapshot of what a fleet instance wrote for the
// tenant (an etcd file with the tenant's revisions), delete.
func TestTenantCommandsAdministerAFleet(t *testing.T) {
	srv := zkservertest.Standalone(t)
	zkFlags := []string{"--zk", srv.Addr(), "--zk-root", "/fleet", "--log-level", "warn"}
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := runTenant(append(args, zkFlags...), &out); err != nil {
			t.Fatalf("zketcd tenant %v: %v", args, err)
		}
		return out.String()
	}
	run("create", "team-a", "--cn", "apiserver-a", "--max-leases", "7")
	run("create", "team-b")
	if err := runTenant(append([]string{"create", "team-c", "--cn", "apiserver-a"}, zkFlags...), &bytes.Buffer{}); err == nil {
		t.Fatal("a second tenant took team-a's CN")
	}
	if err := runTenant(append([]string{"create", "../x"}, zkFlags...), &bytes.Buffer{}); err == nil {
		t.Fatal("a tenant name with a path was accepted")
	}
	list := run("list")
	if !strings.Contains(list, "team-a") || !strings.Contains(list, "apiserver-a") || !strings.Contains(list, `"max_leases"`) && !strings.Contains(list, `"leases":7`) {
		t.Fatalf("list:\n%s", list)
	}
	run("limits", "team-a", "--requests-per-second", "50")
	if got := run("limits", "team-a"); !strings.Contains(got, `"requests_per_second": 50`) || !strings.Contains(got, `"leases": 7`) {
		t.Fatalf("limits after a change:\n%s", got)
	}

	// A fleet instance serves team-a some writes.
	certs := testcerts.New(t)
	lg := testutil.Logger(logrus.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := embed.StartFleet(ctx, embed.Config{
		Engine:      engine.Config{Store: zkstore.Config{Servers: []string{srv.Addr()}, Root: "/fleet", Logger: lg}, Name: "i1", WorldReadableOK: true},
		ClientAddrs: []string{"127.0.0.1:0"}, TLS: certs.ServerTLS(t), Tenants: embed.TenantsConfig{Enabled: true}, Logger: lg,
	})
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg := certs.ClientTLS(t, false)
	tlsCfg.Certificates = []tls.Certificate{certs.ClientWithSubject(t, pkix.Name{CommonName: "apiserver-a"})}
	c, err := clientv3.New(clientv3.Config{Endpoints: f.ClientAddrs(), TLS: tlsCfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := c.Put(ctx, "/registry/"+k, k); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()

	file := filepath.Join(t.TempDir(), "team-a.db")
	if out := run("snapshot", "team-a", file); !strings.Contains(out, "revision 4") {
		t.Fatalf("snapshot: %s", out)
	}
	snap, _, err := etcdformat.ReadFile(file, etcdformat.ReadOptions{})
	if err != nil {
		t.Fatalf("the snapshot file does not read back: %v", err)
	}
	if snap.State.Rev != 4 || snap.Len() != 3 {
		t.Fatalf("snapshot at revision %d with %d keys", snap.State.Rev, snap.Len())
	}

	// Moved to another root while the instance serves it, then the source freed.
	if out := run("move", "team-a", "--to-root", "/moved/team-a"); !strings.Contains(out, "moved tenant team-a from /fleet/roots/team-a to /moved/team-a") {
		t.Fatalf("move: %s", out)
	}
	if list := run("list"); !strings.Contains(list, "/moved/team-a") {
		t.Fatalf("list after the move:\n%s", list)
	}
	if out := run("move", "team-a", "--free-source"); !strings.Contains(out, "freed /fleet/roots/team-a") {
		t.Fatalf("free the source: %s", out)
	}
	if out := run("snapshot", "team-a", file); !strings.Contains(out, "revision 4") {
		t.Fatalf("snapshot after the move: %s", out)
	}
	if err := runTenant(append([]string{"move", "team-b", "--to-root", "/moved/team-a"}, zkFlags...), &bytes.Buffer{}); err == nil {
		t.Fatal("team-b moved into team-a's root")
	}

	f.Close(time.Second)
	if out := run("delete", "team-a"); !strings.Contains(out, "deleted tenant team-a") {
		t.Fatalf("delete: %s", out)
	}
	if list := run("list"); strings.Contains(list, "team-a") {
		t.Fatalf("list after delete:\n%s", list)
	}
	run("create", "team-c", "--cn", "apiserver-a") // the CN is free again
	for _, root := range []string{"/fleet/roots/team-a", "/moved/team-a"} {
		if ok, _, err := zkstore.RootExists(ctx, zkstore.Config{Servers: []string{srv.Addr()}, Root: root, Logger: lg}); err != nil || ok {
			t.Fatalf("%s after the tenant's delete: %v %v", root, ok, err)
		}
	}
}
