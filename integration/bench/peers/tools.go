//go:build tools

// Package peers pins the main packages of the peers the benchmark compares
// zketcd with, etcdctl (which integration/etcdctl runs against zketcd and
// etcd) and etcdutl (snapshot status/restore in integration/snapshot), so that `go mod tidy` keeps them (and everything they need) in
// go.mod/go.sum. It is never compiled into anything; build-peers.sh builds
// the main packages directly into a cache directory.
package peers

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
	_ "go.etcd.io/etcd/v3/tools/benchmark"
)
