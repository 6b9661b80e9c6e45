package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestGetNamesTheToolchainAndAVersion(t *testing.T) {
	info := Get()
	if info.Version == "" || info.Commit == "" {
		t.Fatalf("empty fields: %+v", info)
	}
	if info.GoVersion != runtime.Version() {
		t.Fatalf("GoVersion %q, want %q", info.GoVersion, runtime.Version())
	}
	if s := info.String(); !strings.Contains(s, info.Version) || !strings.Contains(s, info.Commit) {
		t.Fatalf("String() = %q lacks version or commit", s)
	}
}
