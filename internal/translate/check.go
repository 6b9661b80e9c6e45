package translate

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CheckRange validates a Range request before it is evaluated.
func CheckRange(r *pb.RangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

// CheckRangeStream validates a RangeStream request: a Range request without
// custom sort order or revision filters (etcd answers Unimplemented to those).
func CheckRangeStream(r *pb.RangeRequest) error {
	if err := CheckRange(r); err != nil {
		return err
	}
	if !isDefaultOrdering(r.SortTarget, r.SortOrder) {
		return status.Error(codes.Unimplemented, "RangeStream does not support custom sort orders")
	}
	if hasRevisionFilters(r) {
		return status.Error(codes.Unimplemented, "RangeStream does not support revision filters")
	}
	return nil
}

// CheckPut validates a Put request.
func CheckPut(r *pb.PutRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if r.IgnoreValue && len(r.Value) != 0 {
		return rpctypes.ErrGRPCValueProvided
	}
	if r.IgnoreLease && r.Lease != 0 {
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

// CheckDelete validates a DeleteRange request.
func CheckDelete(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

// CheckTxn validates a Txn request: at most maxOps compares and ops per
// branch (nested transactions share the budget as in etcd), every op valid,
// and no key both put twice or put and deleted along one execution path.
func CheckTxn(r *pb.TxnRequest, maxOps int) error {
	if err := checkTxnOps(r, maxOps); err != nil {
		return err
	}
	if _, _, err := checkIntervals(r.Success); err != nil {
		return err
	}
	if _, _, err := checkIntervals(r.Failure); err != nil {
		return err
	}
	return nil
}

func checkTxnOps(r *pb.TxnRequest, maxOps int) error {
	opc := max(len(r.Compare), len(r.Success), len(r.Failure))
	if opc > maxOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, branch := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range branch {
			if err := checkRequestOp(op, maxOps-opc); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkRequestOp(op *pb.RequestOp, maxOps int) error {
	switch v := op.GetRequest().(type) {
	case *pb.RequestOp_RequestRange:
		return CheckRange(v.RequestRange)
	case *pb.RequestOp_RequestPut:
		return CheckPut(v.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		return CheckDelete(v.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		return checkTxnOps(v.RequestTxn, maxOps)
	default:
		// An empty op: etcd answers "key not found".
		return rpctypes.ErrGRPCKeyNotFound
	}
}

// interval is a half-open key interval [begin, end) in etcd's "affine"
// string order, where an empty end is above every key.
type interval struct{ begin, end string }

func affineCmp(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == "":
		return 1
	case b == "":
		return -1
	case a < b:
		return -1
	}
	return 1
}

// overlapsPoint reports whether key k falls in iv, with the comparison etcd's
// interval tree makes (an inverted interval such as [k, "\x00") contains
// nothing).
func (iv interval) overlapsPoint(k string) bool {
	pb, pe := k, k+"\x00"
	if affineCmp(pb, iv.begin) < 0 && affineCmp(pe, iv.begin) <= 0 {
		return false
	}
	return affineCmp(pb, iv.end) < 0
}

type intervals []interval

func (s intervals) contain(k string) bool {
	for _, iv := range s {
		if iv.overlapsPoint(k) {
			return true
		}
	}
	return false
}

// checkIntervals reports ErrGRPCDuplicateKey when ops put one key twice, or
// put a key that a delete of the same path covers; then and else branches of
// a nested transaction may put the same key. It returns the puts and deletes
// for the caller's level.
func checkIntervals(ops []*pb.RequestOp) (map[string]struct{}, intervals, error) {
	var dels intervals
	for _, op := range ops {
		d := op.GetRequestDeleteRange()
		if d == nil {
			continue
		}
		if len(d.RangeEnd) != 0 {
			dels = append(dels, interval{string(d.Key), string(d.RangeEnd)})
		} else {
			dels = append(dels, interval{string(d.Key), string(d.Key) + "\x00"})
		}
	}
	puts := map[string]struct{}{}
	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		putsThen, delsThen, err := checkIntervals(t.Success)
		if err != nil {
			return nil, nil, err
		}
		putsElse, delsElse, err := checkIntervals(t.Failure)
		if err != nil {
			return nil, nil, err
		}
		for k := range putsThen {
			if _, dup := puts[k]; dup || dels.contain(k) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		for k := range putsElse {
			if _, dup := puts[k]; dup {
				if _, fromThen := putsThen[k]; !fromThen {
					return nil, nil, rpctypes.ErrGRPCDuplicateKey
				}
			}
			if dels.contain(k) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		dels = append(dels, delsThen...)
		dels = append(dels, delsElse...)
	}
	for _, op := range ops {
		p := op.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.Key)
		if _, dup := puts[k]; dup || dels.contain(k) {
			return nil, nil, rpctypes.ErrGRPCDuplicateKey
		}
		puts[k] = struct{}{}
	}
	return puts, dels, nil
}

// IsTxnReadonly reports whether every op of both branches is a Range, so the
// transaction can be served by the read path without a log entry.
func IsTxnReadonly(r *pb.TxnRequest) bool {
	for _, branch := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range branch {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

// IsTxnSerializable reports whether every op is a serializable Range.
func IsTxnSerializable(r *pb.TxnRequest) bool {
	for _, branch := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range branch {
			if rr := op.GetRequestRange(); rr == nil || !rr.Serializable {
				return false
			}
		}
	}
	return true
}
