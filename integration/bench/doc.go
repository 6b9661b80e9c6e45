// Package bench is zketcd's side-by-side benchmark harness: in one run on one
// machine it starts etcd, kine (SQLite) and zketcd (on a standalone
// ZooKeeper and on a 3-member loopback ensemble), one server at a time, each
// as its own process, drives each with the same clientv3 workloads, runs
// etcd's own benchmark tool as a cross-check, measures zketcd's recovery
// time and memory, and writes the results (markdown, CSV, JSON, PNG plots).
//
// The same run measures the deployed shape: a 3-member etcd cluster, kine
// on PostgreSQL and 2 and 3 zketcd instances on one root of a 3-member
// ensemble (clients spread over the members or instances), the raw
// go-zookeeper floor of that ensemble (package zkfloor), and real
// kube-apiservers on etcd and on zketcd driven through the Kubernetes REST
// API.
//
// The command is ./cmd/zkbench; `make bench` and `make bench-long` in the
// repository root run it. The peers are built from the Go module proxy by
// build-peers.sh into ${ZKETCD_CACHE:-$HOME/.cache/zketcd}.
package bench
