package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zketcd/zketcd/integration/kubelab"
)

// kubeAPIServerOrSkip returns $KUBE_APISERVER, the kube-apiserver binary
// `make e2e` passes, and skips the test without it.
func kubeAPIServerOrSkip(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("KUBE_APISERVER")
	if bin == "" {
		t.Skip("KUBE_APISERVER is not set; run `make e2e`")
	}
	return bin
}

// newLab returns a kubelab lab in a temporary directory (lab.Dir; with
// $E2E_DIR, in $E2E_DIR/<test name>, kept), closed when the test ends,
// running kube-apiserver from bin and zketcd from $ZKETCD_BINARY (built
// from cmd/zketcd when unset).
func newLab(t *testing.T, bin string) *kubelab.Lab {
	t.Helper()
	dir := t.TempDir()
	if keep := os.Getenv("E2E_DIR"); keep != "" {
		dir = filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "-"))
	}
	zketcd := os.Getenv("ZKETCD_BINARY")
	if zketcd == "" {
		var err error
		if zketcd, err = kubelab.BuildZketcd(t.Context(), dir); err != nil {
			t.Fatal(err)
		}
	}
	lab, err := kubelab.New(dir, bin, zketcd, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	return lab
}

// fatalOn returns a function that ends t on a non-nil error.
func fatalOn(t *testing.T) func(error) {
	return func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}
