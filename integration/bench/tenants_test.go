package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The tenants section is spliced into the markdown report once, replaced
// on every write, carried by the main report's writes (embedScale), and
// says whether the isolation target was met.
func TestTenantsSectionIsSplicedOnceAndCarriedByTheMainReport(t *testing.T) {
	dir := t.TempDir()
	md, data := filepath.Join(dir, "benchmarks.md"), filepath.Join(dir, "bench")
	if err := os.WriteFile(md, []byte("# Benchmarks\n\nhand-written\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := func(name string, rss int64) ProcSample {
		return ProcSample{Name: name, RSS: rss, HeapInuse: rss / 2, Leaders: 1}
	}
	rep := &TenantsReport{Settings: TenantsSettings{Tenants: 2, Objects: 10, Instances: 2, ZKMembers: 3, IsolationRounds: 1},
		Stacks: []TenantsStack{{Stack: TenantsFleet, Tenants: 2, Samples: []TenantsSample{
			{Step: StepEmpty, Procs: []ProcSample{proc("fleet-1", 20<<20), proc("fleet-2", 20<<20)}},
			{Step: StepIdle, Tenants: 2, Procs: []ProcSample{proc("fleet-1", 22<<20), proc("fleet-2", 22<<20)}},
			{Step: StepLoaded, Tenants: 2, Objects: 20, DataBytes: 60 << 10, Procs: []ProcSample{proc("fleet-1", 24<<20), proc("fleet-2", 24<<20)}},
		}}},
		Isolation: &IsolationResult{Quiet: "t000", Instance: "fleet-1", Limit: 200, Phases: []IsolationPhase{
			{Name: PhaseAlone, Seconds: 10, Put: OpStats{N: 100, P50Ms: 1, P99Ms: 10}, Get: OpStats{N: 100, P50Ms: 1, P99Ms: 10}},
			{Name: PhaseLimitedOther, Neighbour: "t001", Seconds: 10, Put: OpStats{N: 100, P50Ms: 1, P99Ms: 20}, Get: OpStats{N: 100, P50Ms: 1, P99Ms: 12}},
		}}}
	for range 2 {
		if err := rep.WriteFiles(data, md); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(md)
	s := string(b)
	if strings.Count(s, tenantsBegin) != 1 || strings.Count(s, tenantsEnd) != 1 || !strings.Contains(s, "hand-written") {
		t.Fatalf("section not spliced once:\n%s", s)
	}
	if !strings.Contains(s, "limited-other-session: 2.00× (missed)") {
		t.Fatalf("no missed isolation target in:\n%s", s)
	}
	if !strings.Contains(embedScale(data), tenantsBegin) {
		t.Fatal("the main report does not carry the tenants section")
	}
	again, err := LoadTenantsReport(filepath.Join(data, "tenants.json"))
	if err != nil || len(again.Stacks) != 1 || again.Isolation == nil {
		t.Fatalf("tenants.json read back: %+v, %v", again, err)
	}
}

// TestTenantsBenchmarkSmoke runs the tenants benchmark's fleet stack
// small (4 tenants on two instances of a standalone ZooKeeper, seconds
// of churn, one short round of the isolation phases) and checks what it
// reports: every tenant started, loaded and churned with each watch
// seeing every write, its leaders spread, sessions shared, the isolation
// phases measured. With $ETCD_BINARY the etcd stacks run too. It builds
// zketcd unless $ZKETCD_BINARY names one.
func TestTenantsBenchmarkSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper and zketcd processes")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	stacks := []string{TenantsFleet}
	if os.Getenv("ETCD_BINARY") != "" {
		stacks = append(stacks, TenantsEtcdOne, TenantsEtcdShared)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	data := t.TempDir()
	rep, err := RunTenants(ctx, TenantsOptions{
		Tenants: 4, Objects: 20, Instances: 2, ZKMembers: 1, ZKHeap: "256m", LoadClients: 8,
		ChurnRate: 40, ChurnFor: 3 * time.Second, ChurnWorkers: 8, Settle: time.Second,
		Isolation: IsolationOptions{Rounds: 1, Phase: 2 * time.Second, QuietRate: 20, FloodClients: 4, FloodLimit: 50},
		Stacks:    stacks, RepoRoot: repo, ZketcdBin: os.Getenv("ZKETCD_BINARY"), EtcdBin: os.Getenv("ETCD_BINARY"),
		DataDir: data, WorkDir: t.TempDir(), Logf: t.Logf,
		// Leadership spread within the test's seconds.
		ZketcdArgs: []string{"--tenant-balance-interval", "500ms"},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := rep.stack(TenantsFleet)
	if f == nil || len(f.Errors) > 0 {
		t.Fatalf("fleet stack: %+v", f)
	}
	churned := f.sample(StepChurn)
	if churned == nil || churned.Tenants != 4 || churned.Objects < 80 || f.Churn == nil {
		t.Fatalf("fleet after the churn: %+v, churn %+v", churned, f.Churn)
	}
	if f.Churn.Writes == 0 || f.Churn.Events != f.Churn.Writes || len(f.Churn.WatchErrors) > 0 {
		t.Fatalf("churn: %d writes, %d events, watch errors %v", f.Churn.Writes, f.Churn.Events, f.Churn.WatchErrors)
	}
	leaders := 0
	for _, p := range churned.Procs {
		leaders += p.Leaders
		if p.ZKSessions < 1 || p.ZKSessions > 4 || p.HeapInuse == 0 || p.RSS == 0 {
			t.Errorf("%s: %+v", p.Name, p)
		}
	}
	if leaders != 4 {
		t.Errorf("%d leaders for 4 tenants", leaders)
	}
	if rep.Isolation == nil || len(rep.Isolation.Errors) > 0 || len(rep.Isolation.Phases) < 3 {
		t.Fatalf("isolation: %+v", rep.Isolation)
	}
	for _, p := range rep.Isolation.Phases {
		if p.Put.N == 0 || p.Get.N == 0 || (p.Neighbour != "" && p.FloodOK == 0) {
			t.Errorf("isolation phase %s: %+v", p.Name, p)
		}
	}
	for _, st := range rep.Stacks[1:] {
		if len(st.Errors) > 0 || st.Churn == nil || st.Churn.Events != st.Churn.Writes {
			t.Errorf("%s: %+v", st.Stack, st)
		}
	}
	md, err := os.ReadFile(filepath.Join(data, "tenants.md"))
	if err != nil || !strings.Contains(string(md), "### Isolation") || !strings.Contains(string(md), "An idle tenant") {
		t.Fatalf("tenants.md: %v\n%s", err, md)
	}
}
