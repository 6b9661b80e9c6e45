package translate

import (
	"bytes"
	"math"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/zketcd/zketcd/internal/revision"
)

// EndKey converts an etcd range_end to the revision package's convention:
// unset selects just the key, "\x00" means no upper bound.
func EndKey(rangeEnd []byte) []byte {
	if len(rangeEnd) == 1 && rangeEnd[0] == 0 {
		return []byte{}
	}
	if len(rangeEnd) == 0 {
		return nil
	}
	return rangeEnd
}

// Range evaluates a validated Range request against r. The header carries
// only the revision (r's current one, even for reads at older revisions, as
// etcd does). Count is the number of keys in the range at the read
// revision, whatever the limit and revision filters.
func Range(r revision.Reader, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	return rangeAt(r, r.Rev(), req, true)
}

// Count returns the number of keys in [key, end) at rev (0: current).
func Count(r revision.Reader, key, rangeEnd []byte, rev int64) (int64, error) {
	var n int64
	err := r.Range(key, EndKey(rangeEnd), rev, func(*revision.KeyValue) bool { n++; return true })
	return n, err
}

// RangeCounted is Range for a caller that knows the request's total count
// (see engine's page counts): it visits at most limit+1 keys and answers
// count as the response's Count.
func RangeCounted(r revision.Reader, req *pb.RangeRequest, count int64) (*pb.RangeResponse, error) {
	resp, err := rangeAt(r, r.Rev(), req, false)
	if err != nil {
		return nil, err
	}
	resp.Count = count
	return resp, nil
}

// RangeChunk is Range without the total count: Count is only the number of
// keys visited (at most limit+1), as etcd's streaming range computes its
// own count.
func RangeChunk(r revision.Reader, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	return rangeAt(r, r.Rev(), req, false)
}

func rangeAt(r revision.Reader, curRev int64, req *pb.RangeRequest, withTotalCount bool) (*pb.RangeResponse, error) {
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: curRev}}
	end := EndKey(req.RangeEnd)
	if req.CountOnly {
		n, err := Count(r, req.Key, req.RangeEnd, req.Revision)
		if err != nil {
			return nil, err
		}
		resp.Count = n
		return resp, nil
	}
	limit := rangeLimit(req)
	fastKeysOnly := req.KeysOnly && req.SortTarget != pb.RangeRequest_VALUE
	var kvs []*mvccpb.KeyValue
	var count int64
	err := r.Range(req.Key, end, req.Revision, func(kv *revision.KeyValue) bool {
		reached := limit > 0 && int64(len(kvs)) >= limit
		if reached && !withTotalCount {
			return false
		}
		count++
		if !reached {
			kvs = append(kvs, toPB(kv, fastKeysOnly))
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	kvs = filterKVs(kvs, req)
	sortKVs(kvs, req)
	if req.Limit > 0 && int64(len(kvs)) > req.Limit {
		kvs = kvs[:req.Limit]
		resp.More = true
	}
	if req.KeysOnly {
		for _, kv := range kvs {
			kv.Value = nil
		}
	}
	resp.Kvs = kvs
	resp.Count = count
	return resp, nil
}

// toPB converts a view KeyValue; the value is shared, not copied. A fast
// keys-only range carries neither value nor lease, like etcd's index-only
// read.
func toPB(kv *revision.KeyValue, keysOnly bool) *mvccpb.KeyValue {
	out := &mvccpb.KeyValue{
		Key:            kv.Key,
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
		Version:        kv.Version,
	}
	if !keysOnly {
		out.Value = kv.Value
		out.Lease = kv.Lease
	}
	return out
}

// ToPB converts a view KeyValue to its protobuf form (value shared).
func ToPB(kv *revision.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	return toPB(kv, false)
}

func rangeLimit(r *pb.RangeRequest) int64 {
	limit := r.Limit
	if !isDefaultOrdering(r.SortTarget, r.SortOrder) || hasRevisionFilters(r) {
		limit = 0
	}
	if limit > 0 && limit < math.MaxInt64 {
		limit++
	}
	return limit
}

func isDefaultOrdering(target pb.RangeRequest_SortTarget, order pb.RangeRequest_SortOrder) bool {
	return order == pb.RangeRequest_NONE ||
		(target == pb.RangeRequest_KEY && order == pb.RangeRequest_ASCEND)
}

func hasRevisionFilters(r *pb.RangeRequest) bool {
	return r.MinModRevision != 0 || r.MaxModRevision != 0 ||
		r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
}

func filterKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) []*mvccpb.KeyValue {
	prune := func(drop func(*mvccpb.KeyValue) bool) {
		j := 0
		for _, kv := range kvs {
			if !drop(kv) {
				kvs[j] = kv
				j++
			}
		}
		kvs = kvs[:j]
	}
	if r.MaxModRevision != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.ModRevision > r.MaxModRevision })
	}
	if r.MinModRevision != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.ModRevision < r.MinModRevision })
	}
	if r.MaxCreateRevision != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision > r.MaxCreateRevision })
	}
	if r.MinCreateRevision != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision < r.MinCreateRevision })
	}
	return kvs
}

// kvSorter sorts with sort.Sort, as etcd does, so that equal elements end up
// in the same order as on etcd.
type kvSorter struct {
	kvs  []*mvccpb.KeyValue
	less func(a, b *mvccpb.KeyValue) bool
}

func (s kvSorter) Len() int           { return len(s.kvs) }
func (s kvSorter) Swap(i, j int)      { s.kvs[i], s.kvs[j] = s.kvs[j], s.kvs[i] }
func (s kvSorter) Less(i, j int) bool { return s.less(s.kvs[i], s.kvs[j]) }

func sortKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) {
	order := r.SortOrder
	if r.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if isDefaultOrdering(r.SortTarget, order) {
		return
	}
	var less func(a, b *mvccpb.KeyValue) bool
	switch r.SortTarget {
	case pb.RangeRequest_KEY:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }
	case pb.RangeRequest_VERSION:
		less = func(a, b *mvccpb.KeyValue) bool { return a.Version < b.Version }
	case pb.RangeRequest_CREATE:
		less = func(a, b *mvccpb.KeyValue) bool { return a.CreateRevision < b.CreateRevision }
	case pb.RangeRequest_MOD:
		less = func(a, b *mvccpb.KeyValue) bool { return a.ModRevision < b.ModRevision }
	case pb.RangeRequest_VALUE:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Value, b.Value) < 0 }
	default:
		return // CheckRange rejected it
	}
	var s sort.Interface = kvSorter{kvs, less}
	if order == pb.RangeRequest_DESCEND {
		s = sort.Reverse(s)
	}
	sort.Sort(s)
}
