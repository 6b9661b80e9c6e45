package engine

import (
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/translate"
)

// listPages pages [prefix, prefix+"0") by limit at the first page's
// revision, as kube-apiserver does, and returns every page's answer.
func listPages(t testing.TB, b *Engine, limit int64, between func()) []*pb.RangeResponse {
	t.Helper()
	req := &pb.RangeRequest{Key: []byte("p/"), RangeEnd: []byte("p0"), Limit: limit, Serializable: true}
	var out []*pb.RangeResponse
	for {
		resp, err := b.Range(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp)
		if !resp.More {
			return out
		}
		if between != nil {
			between()
		}
		rev := resp.Header.Revision
		if req.Revision > 0 {
			rev = req.Revision
		}
		req = &pb.RangeRequest{Key: append(append([]byte(nil), resp.Kvs[len(resp.Kvs)-1].Key...), 0),
			RangeEnd: req.RangeEnd, Limit: limit, Serializable: true, Revision: rev}
	}
}

// Every page of a paginated range answers the count etcd answers — every
// key of the rest of the range at the page's revision — also when it was
// carried from the page before instead of walked, and while writes (new
// keys inside the range, deletes) go on between the pages.
func TestPaginatedRangesAnswerTheirCountWithoutWalkingTheRest(t *testing.T) {
	st := memlog.New(memlog.Options{})
	b, _ := engine(t, st, "a", nil)
	for i := 0; i < 1000; i++ {
		put(t, b, fmt.Sprintf("p/%04d", i), "v")
	}
	n := 0
	pages := listPages(t, b, 70, func() {
		n++
		put(t, b, fmt.Sprintf("p/%04d-new", n*37), "w")
	})
	if len(pages) != 15 {
		t.Fatalf("%d pages of 70 for 1000 keys", len(pages))
	}
	rev := pages[0].Header.Revision
	from := []byte("p/")
	total := 0
	for i, resp := range pages {
		var want *pb.RangeResponse
		if err := b.Read(func(r revision.Reader) error {
			var err error
			want, err = translate.Range(r, &pb.RangeRequest{Key: from, RangeEnd: []byte("p0"), Limit: 70, Revision: rev})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if resp.Count != want.Count || len(resp.Kvs) != len(want.Kvs) || resp.More != want.More {
			t.Fatalf("page %d: count %d, %d keys, more %v; walking answers %d, %d, %v", i, resp.Count, len(resp.Kvs), resp.More, want.Count, len(want.Kvs), want.More)
		}
		total += len(resp.Kvs)
		from = append(append([]byte(nil), resp.Kvs[len(resp.Kvs)-1].Key...), 0)
	}
	if total != 1000 {
		t.Fatalf("listed %d keys at revision %d, want 1000", total, rev)
	}
	if len(b.pages.m) == 0 {
		t.Fatal("no page count was carried")
	}
}

// BenchmarkPaginatedList: a LIST of 100,000 keys in pages of 500 at one
// revision.
func BenchmarkPaginatedList(b *testing.B) {
	st := memlog.New(memlog.Options{})
	e, _ := engine(b, st, "a", nil)
	ctx := context.Background()
	for i := 0; i < 100000; i += 100 {
		var ops []*pb.RequestOp
		for j := i; j < i+100; j++ {
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(fmt.Sprintf("p/%06d", j)), Value: []byte("v")}}})
		}
		if _, err := e.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if pages := listPages(b, e, 500, nil); len(pages) != 200 {
			b.Fatalf("%d pages", len(pages))
		}
	}
}
