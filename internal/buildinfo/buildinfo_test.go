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

// TestLinkedCommitFillsInWhenTheToolchainStampedNone: a binary built where
// the toolchain embeds no VCS stamp (a git worktree, a container build
// without .git, -buildvcs=false) reports the commit and the modified flag
// make build links in. Test binaries carry no stamp, as such builds.
func TestLinkedCommitFillsInWhenTheToolchainStampedNone(t *testing.T) {
	defer func(c, m string) { commit, modified = c, m }(commit, modified)
	commit, modified = "0123456789abcdef0123456789abcdef01234567", "true"
	info := Get()
	if info.Commit != commit || !info.Modified {
		t.Fatalf("Get() = %+v, want the linked commit %s, modified", info, commit)
	}
	commit, modified = "", ""
	if info := Get(); info.Commit != "unknown" || info.Modified {
		t.Fatalf("nothing linked nor stamped: %+v", info)
	}
}
