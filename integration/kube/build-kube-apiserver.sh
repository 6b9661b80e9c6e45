#!/usr/bin/env bash
# Builds kube-apiserver (the version pinned in ./go.mod, v1.37.2) from the Go
# module proxy into a cache directory keyed by version:
#
#   ${ZKETCD_CACHE:-$HOME/.cache/zketcd}/kube-apiserver-<version>/kube-apiserver
#
# If that binary already exists and `--version` prints "Kubernetes <version>",
# nothing is built. The path of the binary is the last line on stdout; all
# logging goes to stderr. Needs only Go (>= the `go` line of go.mod, or a Go
# that may fetch that toolchain) and the module proxy; no git checkout of
# kubernetes, no cgo (the binary is static, like upstream's release builds).
#
# Cold build: ~10-20 min on 2 cores, ~2.5 GB peak RSS (the linker), ~2.7 GB of
# Go build cache, ~76 MB of module downloads.
#
# Environment:
#   ZKETCD_CACHE       cache root (default $HOME/.cache/zketcd)
#   KUBE_BUILD_JOBS    if set, passed as `go build -p N` (limit parallelism/memory)
#   KUBE_BUILD_FORCE=1 rebuild even if a working cached binary exists
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "build-kube-apiserver: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go not found in PATH"
if [ ! -f "$here/go.mod" ] || [ ! -f "$here/go.sum" ]; then
	die "missing $here/go.mod or go.sum (run gen-replaces.sh)"
fi

# The version is whatever go.mod pins (single source of truth).
KUBE_VERSION="$(awk '
	$1 == "require" && $2 == "k8s.io/kubernetes" { print $3; exit }
	$1 == "k8s.io/kubernetes" && $2 ~ /^v/       { print $2; exit }' "$here/go.mod")"
[[ "$KUBE_VERSION" =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || die "cannot read k8s.io/kubernetes version from go.mod (got '$KUBE_VERSION')"
KUBE_MINOR="${BASH_REMATCH[1]}"

cache_root="${ZKETCD_CACHE:-${HOME:-/tmp}/.cache/zketcd}"
out_dir="$cache_root/kube-apiserver-$KUBE_VERSION"
out="$out_dir/kube-apiserver"

works() {
	[ -x "$1" ] || return 1
	local v
	v="$("$1" --version 2>/dev/null)" || return 1
	[ "$v" = "Kubernetes $KUBE_VERSION" ]
}

if [ "${KUBE_BUILD_FORCE:-0}" != 1 ] && works "$out"; then
	log "cached: $out ($("$out" --version))"
	echo "$out"
	exit 0
fi

mkdir -p "$out_dir"
# Serialize concurrent builds of the same version (e.g. parallel test jobs).
if command -v flock >/dev/null 2>&1; then
	exec 9>"$out_dir/.lock"
	log "waiting for lock $out_dir/.lock"
	flock 9
	if [ "${KUBE_BUILD_FORCE:-0}" != 1 ] && works "$out"; then
		log "cached (built by another process): $out"
		echo "$out"
		exit 0
	fi
fi

cd "$here"
export GOWORK=off
export CGO_ENABLED="${CGO_ENABLED:-0}"
# go.mod/go.sum are committed and complete: build with -mod=readonly (flags on
# the command line override any -mod in the caller's GOFLAGS).
modflags=(-mod=readonly -buildvcs=false)

log "$(go version); GOPROXY=$(go env GOPROXY); GOCACHE=$(go env GOCACHE); CGO_ENABLED=$CGO_ENABLED"
log "building kube-apiserver $KUBE_VERSION -> $out"
start=$SECONDS

# Fetch modules first, with retries: a flaky proxy should not cost a rebuild.
for attempt in 1 2 3; do
	if go mod download >&2; then break; fi
	[ "$attempt" -lt 3 ] || die "go mod download failed 3 times"
	log "go mod download failed (attempt $attempt), retrying in $((attempt * 10))s"
	sleep $((attempt * 10))
done
log "modules ready after $((SECONDS - start))s"

# Deterministic build date: the publication time of the kubernetes module.
build_date="$(go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes 2>/dev/null || true)"
build_date="${build_date:-1970-01-01T00:00:00Z}"

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$KUBE_MINOR"
	ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

jobs=()
[ -z "${KUBE_BUILD_JOBS:-}" ] || jobs=(-p "$KUBE_BUILD_JOBS")

tmp="$out_dir/.kube-apiserver.tmp.$$"
trap 'rm -f "$tmp"' EXIT
go build "${modflags[@]}" "${jobs[@]}" -trimpath -ldflags "$ldflags" -o "$tmp" \
	k8s.io/kubernetes/cmd/kube-apiserver >&2
works "$tmp" || die "built binary does not report 'Kubernetes $KUBE_VERSION': $("$tmp" --version 2>&1 || true)"
mv -f "$tmp" "$out"
trap - EXIT

log "built in $((SECONDS - start))s: $out ($(du -h "$out" | cut -f1), $("$out" --version))"
echo "$out"
