package zkstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

func registryConfig(t *testing.T, root string) zkstore.Config {
	lg := testutil.Logger(logrus.WarnLevel)
	return zkstore.Config{Servers: []string{sharedZK.Addr(t)}, Root: root, SessionTimeout: 4 * time.Second, Logger: lg}
}

func openRegistry(t *testing.T, root string) *zkstore.Registry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := zkstore.OpenRegistry(ctx, registryConfig(t, root))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func TestRegistryKeepsNamesAndCNsUnique(t *testing.T) {
	r := openRegistry(t, sharedZK.FreshRoot())
	if _, err := r.CreateTenant(zkstore.TenantRecord{Name: "a", CNs: []string{"a", "shared/cn"}}); err != nil {
		t.Fatal(err)
	}
	_, err := r.CreateTenant(zkstore.TenantRecord{Name: "a", CNs: []string{"other"}})
	if !errors.Is(err, zkstore.ErrTenantExists) {
		t.Fatalf("same name again: %v", err)
	}
	_, err = r.CreateTenant(zkstore.TenantRecord{Name: "b", CNs: []string{"b", "shared/cn"}})
	if !errors.Is(err, zkstore.ErrTenantExists) {
		t.Fatalf("a CN of another tenant: %v", err)
	}
	// Nothing of the refused create was registered: b's own CN is free.
	if _, err := r.CreateTenant(zkstore.TenantRecord{Name: "c", CNs: []string{"b"}}); err != nil {
		t.Fatalf("the refused create left its CN behind: %v", err)
	}
	recs, _, _, err := r.Tenants(false)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Name != "a" || recs[1].Name != "c" || recs[0].State != zkstore.TenantActive {
		t.Fatalf("tenants = %+v", recs)
	}
}

func TestRegistryChangesFireTheWatch(t *testing.T) {
	r := openRegistry(t, sharedZK.FreshRoot())
	rec, err := r.CreateTenant(zkstore.TenantRecord{Name: "a", CNs: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	_, before, watch, err := r.Tenants(true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetTenantLimits(rec, json.RawMessage(`{"leases":3}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watch:
	case <-time.After(10 * time.Second):
		t.Fatal("a change of limits did not fire the registry's watch")
	}
	recs, after, _, err := r.Tenants(false)
	if err != nil {
		t.Fatal(err)
	}
	if after <= before || string(recs[0].Limits) != `{"leases":3}` {
		t.Fatalf("changes %d -> %d, limits %s", before, after, recs[0].Limits)
	}
	// The compare-and-swap: a stale record is refused.
	if _, err := r.SetTenantLimits(rec, json.RawMessage(`{"leases":4}`)); err == nil {
		t.Fatal("limits written over a newer record")
	}
}

func TestRegistryRefusesASingleClusterRoot(t *testing.T) {
	root := sharedZK.FreshRoot()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := zkstore.Open(ctx, registryConfig(t, root))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := zkstore.OpenRegistry(ctx, registryConfig(t, root)); !errors.Is(err, zkstore.ErrNotFleet) {
		t.Fatalf("OpenRegistry on a single cluster's root: %v", err)
	}
}

func TestDeleteTenantWaitsForItsMembersThenFreesEveryZnode(t *testing.T) {
	fleet := sharedZK.FreshRoot()
	r := openRegistry(t, fleet)
	if _, err := r.CreateTenant(zkstore.TenantRecord{Name: "gone", CNs: []string{"gone"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := zkstore.Open(ctx, registryConfig(t, zkstore.TenantRoot(fleet, "gone")))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterMember(zkstore.Member{ID: 7, Name: "serving"}); err != nil {
		t.Fatal(err)
	}
	// The instance serving it stops a moment after the delete began.
	go func() { time.Sleep(500 * time.Millisecond); st.Close() }()
	if err := r.DeleteTenant(ctx, "gone", 20*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := zkstore.RootExists(ctx, registryConfig(t, zkstore.TenantRoot(fleet, "gone"))); err != nil || ok {
		t.Fatalf("the tenant's root is still there (%v, %v)", ok, err)
	}
	if _, err := r.Tenant("gone"); !errors.Is(err, zkstore.ErrTenantNotFound) {
		t.Fatalf("record after delete: %v", err)
	}
	if _, err := r.CreateTenant(zkstore.TenantRecord{Name: "again", CNs: []string{"gone"}}); err != nil {
		t.Fatalf("the deleted tenant's CN is not free: %v", err)
	}
}

func TestDeleteTenantGivesUpWhileAnInstanceServesIt(t *testing.T) {
	fleet := sharedZK.FreshRoot()
	r := openRegistry(t, fleet)
	if _, err := r.CreateTenant(zkstore.TenantRecord{Name: "busy", CNs: []string{"busy"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := zkstore.Open(ctx, registryConfig(t, zkstore.TenantRoot(fleet, "busy")))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.RegisterMember(zkstore.Member{ID: 7, Name: "serving"}); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteTenant(ctx, "busy", 300*time.Millisecond, nil); err == nil {
		t.Fatal("deleted a tenant an instance still serves")
	}
	rec, err := r.Tenant("busy")
	if err != nil || rec.State != zkstore.TenantDeleting {
		t.Fatalf("record = %+v, %v: want it marked deleting", rec, err)
	}
	if _, err := st.Head(); err != nil {
		t.Fatalf("the root was touched: %v", err)
	}
}
