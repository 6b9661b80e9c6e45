package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zketcd/zketcd/integration/kubelab"
)

// TestKubeAPIServer runs the experiment "kube-apiserver on ZooKeeper"
// (every kubelab step, in order, one subtest each) with the kube-apiserver
// binary named by $KUBE_APISERVER. `make e2e` builds (or finds cached) that
// binary and sets it; without it the test is skipped, so `make test` does
// not need the ~17-minute kube-apiserver build.
//
// $ZKETCD_BINARY names a zketcd binary (`make e2e` passes bin/zketcd);
// without it the test builds cmd/zketcd. $E2E_DIR keeps every log and data
// file in that directory instead of a temporary one.
func TestKubeAPIServer(t *testing.T) {
	bin := os.Getenv("KUBE_APISERVER")
	if bin == "" {
		t.Skip("KUBE_APISERVER is not set: this test needs a kube-apiserver binary " +
			"(integration/kube/build-kube-apiserver.sh builds one, ~17 min cold); run `make e2e`")
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("KUBE_APISERVER=%s is not an executable file (%v)", bin, err)
	}
	version, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	ctx := t.Context()
	dir := os.Getenv("E2E_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	zketcd := os.Getenv("ZKETCD_BINARY")
	if zketcd == "" {
		start := time.Now()
		if zketcd, err = kubelab.BuildZketcd(ctx, dir); err != nil {
			t.Fatal(err)
		}
		t.Logf("built %s in %s", zketcd, time.Since(start).Round(time.Millisecond))
	}
	zv, _ := exec.Command(zketcd, "version").Output()
	t.Logf("%s (%s); %s (%s); lab directory %s", strings.TrimSpace(string(version)), bin, strings.TrimSpace(string(zv)), zketcd, dir)

	lab, err := kubelab.New(dir, bin, zketcd, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	x := kubelab.NewExperiment(lab)
	start := time.Now()
	for _, s := range kubelab.Steps() {
		t.Run(s.Name, func(t *testing.T) {
			stepStart := time.Now()
			logsBefore := len(lab.LogFiles())
			if err := s.Run(ctx, x, t.Logf); err != nil {
				for _, f := range lab.LogFiles()[logsBefore:] {
					t.Logf("last lines of %s:\n%s", f, kubelab.TailLog(f, 15))
				}
				t.Fatalf("%s: %v", s.Title, err)
			}
			t.Logf("%s: ok in %s", s.Name, time.Since(stepStart).Round(time.Millisecond))
		})
	}
	t.Logf("summary (all steps in %s):\n    %s", time.Since(start).Round(time.Second), strings.Join(x.Summary(), "\n    "))
}
