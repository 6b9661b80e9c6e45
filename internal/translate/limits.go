package translate

import (
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// etcd's request limits and their defaults (--max-request-bytes,
// --max-txn-ops).
const (
	DefaultMaxRequestBytes = 1536 * 1024
	DefaultMaxTxnOps       = 128
)

// CheckRequestSize refuses a write request whose encoding exceeds maxBytes
// with etcd's "request is too large". etcd checks the size of what it
// proposes to raft, so read-only requests are exempt.
func CheckRequestSize(req proto.Message, maxBytes int) error {
	if proto.Size(req) > maxBytes {
		return rpctypes.ErrGRPCRequestTooLarge
	}
	return nil
}
