// Package bench is zketcd's side-by-side benchmark harness: in one run on one
// machine it starts etcd, kine (SQLite) and zketcd (on a standalone
// ZooKeeper and on a 3-member loopback ensemble), one server at a time, each
// as its own process, drives each with the same clientv3 workloads, runs
// etcd's own benchmark tool as a cross-check, measures zketcd's recovery
// time and memory, and writes the results (markdown, CSV, JSON, PNG plots).
//
// The command is ./cmd/zkbench; `make bench` and `make bench-long` in the
// repository root run it. The peers are built from the Go module proxy by
// build-peers.sh into ${ZKETCD_CACHE:-$HOME/.cache/zketcd}.
package bench
