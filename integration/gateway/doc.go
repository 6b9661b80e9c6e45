// Package gateway compares etcd's HTTP/JSON gateway and HTTP endpoints
// (/v3/..., /health, /version, ...) on embedded etcd 3.7.3 and zketcd: the
// same requests in the same order, the answers equal after normalising the
// values that differ between two servers by nature (ids, sizes, terms).
package gateway
