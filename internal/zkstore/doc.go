// Package zkstore owns every ZooKeeper call zketcd makes: the znode layout
// under the root, the encoding of log entries, the commit multi that claims
// the next log position (exactly once, even when the connection drops
// mid-commit), the head znode that tailers watch, the sync barrier, pipelined
// reads of the log, and the instance's ephemeral member znode.
//
// It knows nothing of etcd requests: it stores and returns revision.Entry
// values. No other package imports the ZooKeeper client.
//
// Errors: every method returns ErrUnavailable (wrapped, with the cause) when
// ZooKeeper cannot be reached, so callers can answer etcd's Unavailable
// without seeing a ZooKeeper error string.
package zkstore
