package translate

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/revision"
)

// Store is the state a write is evaluated against: a revision.Reader that
// stages writes in an open transaction. *revision.Batch implements it.
type Store interface {
	revision.Reader
	// Put stages a write of key in the open transaction.
	Put(key, value []byte, lease int64) *revision.KeyValue
	// DeleteRange stages the deletion of the live keys in [key, end) and
	// returns them.
	DeleteRange(key, end []byte) ([]*revision.KeyValue, error)
	// HasChanges reports whether the open transaction changed a key.
	HasChanges() bool
	// TxnRev is the revision the open transaction writes at.
	TxnRev() int64
}

var _ Store = (*revision.Batch)(nil)

// curRev is the revision reads inside the open transaction report.
func curRev(s Store) int64 {
	if s.HasChanges() {
		return s.TxnRev()
	}
	return s.Rev()
}

// Put evaluates a validated Put in s's open transaction.
func Put(s Store, req *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkPut(s, req); err != nil {
		return nil, err
	}
	return put(s, req)
}

// DeleteRange evaluates a validated DeleteRange in s's open transaction.
func DeleteRange(s Store, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return deleteRange(s, req)
}

func checkPut(s Store, req *pb.PutRequest) error {
	if req.Lease != 0 && s.Lease(req.Lease) == nil {
		return rpctypes.ErrGRPCLeaseNotFound
	}
	if req.IgnoreValue || req.IgnoreLease {
		if get(s, req.Key) == nil {
			return rpctypes.ErrGRPCKeyNotFound
		}
	}
	return nil
}

func get(r revision.Reader, key []byte) *revision.KeyValue {
	var out *revision.KeyValue
	_ = r.Range(key, nil, 0, func(kv *revision.KeyValue) bool { out = kv; return false })
	return out
}

func put(s Store, req *pb.PutRequest) (*pb.PutResponse, error) {
	resp := &pb.PutResponse{Header: &pb.ResponseHeader{}}
	value, lease := req.Value, req.Lease
	var prev *revision.KeyValue
	if req.IgnoreValue || req.IgnoreLease || req.PrevKv {
		prev = get(s, req.Key)
		if prev == nil && (req.IgnoreValue || req.IgnoreLease) {
			return nil, rpctypes.ErrGRPCKeyNotFound
		}
	}
	if req.IgnoreValue {
		value = prev.Value
	}
	if req.IgnoreLease {
		lease = prev.Lease
	}
	if req.PrevKv && prev != nil {
		resp.PrevKv = ToPB(prev)
	}
	s.Put(bytes.Clone(req.Key), value, lease)
	resp.Header.Revision = s.TxnRev()
	return resp, nil
}

func deleteRange(s Store, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp := &pb.DeleteRangeResponse{Header: &pb.ResponseHeader{}}
	deleted, err := s.DeleteRange(req.Key, EndKey(req.RangeEnd))
	if err != nil {
		return nil, err
	}
	if req.PrevKv {
		resp.PrevKvs = make([]*mvccpb.KeyValue, len(deleted))
		for i, kv := range deleted {
			resp.PrevKvs[i] = ToPB(kv)
		}
	}
	resp.Deleted = int64(len(deleted))
	if len(deleted) > 0 || s.HasChanges() {
		resp.Header.Revision = s.TxnRev()
	} else {
		resp.Header.Revision = s.Rev()
	}
	return resp, nil
}

// Txn evaluates a validated Txn in s's open transaction: compares at the
// state before the transaction, then every check of the chosen path (lease
// existence, ignore_* on missing keys, read revisions), then the ops in
// order. A failed check returns its error before anything is staged.
func Txn(s Store, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	path := compareToPath(s, req)
	if _, err := checkTxn(s, req, path); err != nil {
		return nil, err
	}
	resp, _ := newTxnResp(req, path)
	if _, err := executeTxn(s, req, path, resp); err != nil {
		return nil, err
	}
	resp.Header.Revision = curRev(s)
	return resp, nil
}

// compareToPath evaluates the compares of req and of every nested
// transaction on the chosen path, depth first.
func compareToPath(r revision.Reader, req *pb.TxnRequest) []bool {
	ok := applyCompares(r, req.Compare)
	path := []bool{ok}
	ops := req.Success
	if !ok {
		ops = req.Failure
	}
	for _, op := range ops {
		if t := op.GetRequestTxn(); t != nil {
			path = append(path, compareToPath(r, t)...)
		}
	}
	return path
}

func applyCompares(r revision.Reader, cmps []*pb.Compare) bool {
	for _, c := range cmps {
		if !applyCompare(r, c) {
			return false
		}
	}
	return true
}

func applyCompare(r revision.Reader, c *pb.Compare) bool {
	matched, found := true, false
	err := r.Range(c.Key, EndKey(c.RangeEnd), 0, func(kv *revision.KeyValue) bool {
		found = true
		if !compareKV(c, kv) {
			matched = false
			return false
		}
		return true
	})
	if err != nil {
		return false
	}
	if !found {
		if c.Target == pb.Compare_VALUE {
			// A missing key has no value, not an empty one.
			return false
		}
		return compareKV(c, &revision.KeyValue{})
	}
	return matched
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareKV(c *pb.Compare, kv *revision.KeyValue) bool {
	var result int
	switch c.Target {
	case pb.Compare_VALUE:
		result = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		result = cmpInt(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		result = cmpInt(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		result = cmpInt(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		result = cmpInt(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return result == 0
	case pb.Compare_NOT_EQUAL:
		return result != 0
	case pb.Compare_GREATER:
		return result > 0
	case pb.Compare_LESS:
		return result < 0
	}
	return true
}

func branch(req *pb.TxnRequest, path []bool) []*pb.RequestOp {
	if path[0] {
		return req.Success
	}
	return req.Failure
}

// checkTxn runs the checks etcd makes before executing the chosen path; it
// returns how many nested transactions the path contains.
func checkTxn(r revision.Reader, req *pb.TxnRequest, path []bool) (int, error) {
	txns := 0
	for _, op := range branch(req, path) {
		var err error
		switch v := op.GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			err = checkRangeRev(r, v.RequestRange)
		case *pb.RequestOp_RequestPut:
			if s, ok := r.(Store); ok {
				err = checkPut(s, v.RequestPut)
			}
		case *pb.RequestOp_RequestTxn:
			var n int
			n, err = checkTxn(r, v.RequestTxn, path[1:])
			txns += n + 1
			path = path[n+1:]
		}
		if err != nil {
			return 0, err
		}
	}
	return txns, nil
}

func checkRangeRev(r revision.Reader, req *pb.RangeRequest) error {
	switch {
	case req.Revision == 0:
		return nil
	case req.Revision > r.Rev():
		return rpctypes.ErrGRPCFutureRev
	case req.Revision < r.CompactRev():
		return rpctypes.ErrGRPCCompacted
	}
	return nil
}

// newTxnResp allocates the response tree for the chosen path.
func newTxnResp(req *pb.TxnRequest, path []bool) (*pb.TxnResponse, int) {
	ops := branch(req, path)
	resp := &pb.TxnResponse{
		Header:    &pb.ResponseHeader{},
		Succeeded: path[0],
		Responses: make([]*pb.ResponseOp, len(ops)),
	}
	txns := 0
	for i, op := range ops {
		switch v := op.GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{}}
		case *pb.RequestOp_RequestPut:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{}}
		case *pb.RequestOp_RequestDeleteRange:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{}}
		case *pb.RequestOp_RequestTxn:
			sub, n := newTxnResp(v.RequestTxn, path[1:])
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: sub}}
			path = path[1+n:]
			txns += n + 1
		}
	}
	return resp, txns
}

func executeTxn(s Store, req *pb.TxnRequest, path []bool, resp *pb.TxnResponse) (int, error) {
	txns := 0
	for i, op := range branch(req, path) {
		out := resp.Responses[i]
		switch v := op.GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			rr, err := rangeAt(s, curRev(s), v.RequestRange, true)
			if err != nil {
				return 0, err
			}
			out.Response.(*pb.ResponseOp_ResponseRange).ResponseRange = rr
		case *pb.RequestOp_RequestPut:
			pr, err := put(s, v.RequestPut)
			if err != nil {
				return 0, err
			}
			out.Response.(*pb.ResponseOp_ResponsePut).ResponsePut = pr
		case *pb.RequestOp_RequestDeleteRange:
			dr, err := deleteRange(s, v.RequestDeleteRange)
			if err != nil {
				return 0, err
			}
			out.Response.(*pb.ResponseOp_ResponseDeleteRange).ResponseDeleteRange = dr
		case *pb.RequestOp_RequestTxn:
			sub := out.Response.(*pb.ResponseOp_ResponseTxn).ResponseTxn
			n, err := executeTxn(s, v.RequestTxn, path[1:], sub)
			if err != nil {
				return 0, err
			}
			// etcd leaves the header of nested responses at revision 0.
			txns += n + 1
			path = path[n+1:]
		}
	}
	return txns, nil
}
