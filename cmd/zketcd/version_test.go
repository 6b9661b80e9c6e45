package main

import (
	"bytes"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/version"

	"github.com/zketcd/zketcd/internal/buildinfo"
)

// TestVersionPrintsTheBuildAndTheEtcdAPI: `zketcd version` names the build
// (version set at link time, commit, toolchain) and the etcd API served.
func TestVersionPrintsTheBuildAndTheEtcdAPI(t *testing.T) {
	var out bytes.Buffer
	printVersion(&out)
	b := buildinfo.Get()
	for _, want := range []string{"zketcd Version: " + b.Version + "\n", "Git SHA: " + b.Commit, "Go Version: " + b.GoVersion + "\n", "etcd API Version: " + version.Version + "\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("zketcd version lacks %q:\n%s", want, out.String())
		}
	}
}
