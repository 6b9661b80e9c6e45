// Package buildinfo says which build of zketcd is running: its version,
// the commit it was built from and the Go toolchain. It is read by
// `zketcd version`, the HTTP /version endpoint and the build-info metric.
//
// The version is set at link time (`-ldflags "-X
// github.com/zketcd/zketcd/internal/buildinfo.version=v0.4.0"`, which
// `make build` does from `git describe`); the commit and whether the tree
// had uncommitted changes come from the VCS stamp the Go toolchain embeds
// when it builds inside a git checkout, else from the commit and modified
// variables set at link time the same way (make build and the Dockerfile
// set them: the toolchain stamps nothing in a git worktree, in a container
// build without .git, or with -buildvcs=false). Nothing here changes after
// start.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// version is zketcd's own version, set at link time; "dev" when not.
var version = "dev"

// commit and modified ("true" or "false") are the git commit and whether
// the tree had uncommitted changes, set at link time; the toolchain's VCS
// stamp, when the binary has one, takes precedence.
var commit, modified string

// Info describes one build.
type Info struct {
	// Version is zketcd's release version, or "dev" for a build without one.
	Version string
	// Commit is the git commit the binary was built from ("unknown" when
	// the toolchain embedded none, e.g. built outside a checkout).
	Commit string
	// Modified reports uncommitted changes in the tree at build time.
	Modified bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Get returns the running build's Info. It reads only what the binary
// carries, so it is safe for concurrent use and always returns the same.
func Get() Info {
	info := Info{Version: version, Commit: "unknown", GoVersion: runtime.Version()}
	if commit != "" {
		info.Commit, info.Modified = commit, modified == "true"
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the one-line form `zketcd version` prints.
func (i Info) String() string {
	s := i.Version + " (commit " + i.Commit
	if i.Modified {
		s += ", modified"
	}
	return s + ", " + i.GoVersion + ")"
}
