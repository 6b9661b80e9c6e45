package engine

import (
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// pageCounts makes a paginated range O(keys) instead of O(keys²/page).
// etcd's Range answers the count of every key in the range, whatever the
// limit, so each page of kube-apiserver's paginated LIST (500 keys, the
// next page starting right after the last key, at the first page's
// revision) walks the rest of the range to count it. At a fixed revision
// that count never changes: the page at [k, end) that returned n keys of
// count c leaves c−n keys in [last+"\x00", end). So each answer that has
// more records that count for its continuation key, and the next page
// takes it instead of walking. Only plain pages qualify: no sort, no
// revision filters, a revision that is fixed (the request's, or the one a
// current read was answered at). Safe for concurrent use.
type pageCounts struct {
	mu    sync.Mutex
	m     map[pageKey]int64
	order []pageKey // insertion order, for eviction
}

type pageKey struct {
	key, end string
	rev      int64
}

// pageCountEntries bounds the remembered counts (a few hundred bytes each).
const pageCountEntries = 4096

// pageable reports whether req is a plain page whose count can be carried.
func pageable(req *pb.RangeRequest) bool {
	return req.Limit > 0 && len(req.RangeEnd) > 0 && !req.CountOnly &&
		req.SortOrder == pb.RangeRequest_NONE &&
		req.MinModRevision == 0 && req.MaxModRevision == 0 && req.MinCreateRevision == 0 && req.MaxCreateRevision == 0
}

// lookup returns the count remembered for req at its revision.
func (p *pageCounts) lookup(req *pb.RangeRequest) (int64, bool) {
	if req.Revision <= 0 || !pageable(req) {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.m[pageKey{string(req.Key), string(req.RangeEnd), req.Revision}]
	return c, ok
}

// record remembers the count of the page after resp (a response to req,
// read at revision rev).
func (p *pageCounts) record(req *pb.RangeRequest, resp *pb.RangeResponse, rev int64) {
	if !pageable(req) || !resp.More || len(resp.Kvs) == 0 {
		return
	}
	next := append(append([]byte(nil), resp.Kvs[len(resp.Kvs)-1].Key...), 0)
	k := pageKey{string(next), string(req.RangeEnd), rev}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[pageKey]int64)
	}
	if _, ok := p.m[k]; !ok {
		p.order = append(p.order, k)
	}
	p.m[k] = resp.Count - int64(len(resp.Kvs))
	for len(p.order) > pageCountEntries {
		delete(p.m, p.order[0])
		p.order = p.order[1:]
	}
}
