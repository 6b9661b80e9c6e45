#!/usr/bin/env bash
# Builds the peers the benchmark compares zketcd with, from the Go module
# proxy, into a cache directory keyed by version (nothing is built if a
# working binary is already there):
#
#   $CACHE/etcd-v3.7.3/etcd            go.etcd.io/etcd/server/v3 v3.7.3
#   $CACHE/etcd-v3.7.3/etcdctl         go.etcd.io/etcd/etcdctl/v3 v3.7.3
#   $CACHE/etcd-v3.7.3/etcdutl         go.etcd.io/etcd/etcdutl/v3 v3.7.3 (snapshot status/restore)
#   $CACHE/etcd-v3.7.3/benchmark       go.etcd.io/etcd/v3/tools/benchmark v3.7.1
#                                      (client/pkg v3.7.3; v3.7.2+ of the root
#                                      module are not served by the proxy)
#   $CACHE/kine-v0.17.5/kine           github.com/k3s-io/kine v0.17.5 (cgo: SQLite)
#
# CACHE is ${ZKETCD_CACHE:-$HOME/.cache/zketcd}. etcd, etcdctl and the benchmark
# tool are built from the wrapper module in ./peers (etcd's own go.mod files carry
# replace directives, so `go install ...@v3.7.3` does not work); kine with
# `go install`. Output: one line per binary, NAME=PATH, on stdout; logs go to
# stderr. Cold: etcd+benchmark ~1.5 min, kine ~2.5 min on 2 cores.
#
# Usage: build-peers.sh [etcd] [etcdctl] [etcdutl] [benchmark] [kine]   (default: all but etcdutl)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "build-peers: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
command -v go >/dev/null 2>&1 || die "go not found in PATH"

ETCD_VERSION=v3.7.3
KINE_VERSION=v0.17.5
cache_root="${ZKETCD_CACHE:-${HOME:-/tmp}/.cache/zketcd}"
etcd_dir="$cache_root/etcd-$ETCD_VERSION"
kine_dir="$cache_root/kine-$KINE_VERSION"
export GOWORK=off

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(etcd etcdctl benchmark kine)

locked() { # locked DIR: serialize concurrent builds into DIR
	mkdir -p "$1"
	if command -v flock >/dev/null 2>&1; then
		exec 9>"$1/.lock"
		flock 9
	fi
}

build_wrapper() { # build_wrapper NAME PKG CHECK...
	local name=$1 pkg=$2; shift 2
	local out="$etcd_dir/$name"
	if "$@" "$out" >/dev/null 2>&1; then echo "$name=$out"; return; fi
	locked "$etcd_dir"
	if ! "$@" "$out" >/dev/null 2>&1; then
		log "building $pkg -> $out"
		local start=$SECONDS tmp="$out.tmp.$$"
		(cd "$here/peers" && go build -mod=readonly -trimpath -o "$tmp" "$pkg") >&2 || die "build $pkg failed"
		mv -f "$tmp" "$out"
		log "built $name in $((SECONDS - start))s"
	fi
	echo "$name=$out"
}

etcd_ok() { [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q "etcd Version: ${ETCD_VERSION#v}"; }
etcdutl_ok() { [ -x "$1" ] && "$1" version 2>/dev/null | grep -q "etcdutl version: ${ETCD_VERSION#v}"; }
etcdctl_ok() { [ -x "$1" ] && "$1" version 2>/dev/null | grep -q "etcdctl version: ${ETCD_VERSION#v}"; }
bench_ok() { [ -x "$1" ] && "$1" --help 2>/dev/null | grep -q "benchmark"; }
kine_ok() { [ -x "$1" ] && "$1" --help >/dev/null 2>&1; }

for w in "${want[@]}"; do
	case "$w" in
	etcd) build_wrapper etcd go.etcd.io/etcd/server/v3 etcd_ok ;;
	etcdctl) build_wrapper etcdctl go.etcd.io/etcd/etcdctl/v3 etcdctl_ok ;;
	etcdutl) build_wrapper etcdutl go.etcd.io/etcd/etcdutl/v3 etcdutl_ok ;;
	benchmark) build_wrapper benchmark go.etcd.io/etcd/v3/tools/benchmark bench_ok ;;
	kine)
		out="$kine_dir/kine"
		if ! kine_ok "$out"; then
			locked "$kine_dir"
			if ! kine_ok "$out"; then
				log "go install github.com/k3s-io/kine@$KINE_VERSION -> $kine_dir (cgo, SQLite)"
				start=$SECONDS
				GOBIN="$kine_dir" CGO_ENABLED=1 go install -trimpath "github.com/k3s-io/kine@$KINE_VERSION" >&2 || die "go install kine failed"
				log "built kine in $((SECONDS - start))s"
			fi
		fi
		echo "kine=$out"
		;;
	*) die "unknown peer $w (etcd, etcdctl, etcdutl, benchmark, kine)" ;;
	esac
done
