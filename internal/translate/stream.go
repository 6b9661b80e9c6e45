package translate

import (
	"context"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/revision"
)

// initialStreamChunk is the first chunk's limit of a RangeStream; later
// chunks double or halve toward the byte target, as etcd sizes them.
const initialStreamChunk = 10

// ReadFunc runs fn on a consistent state of the view (no barrier: the
// caller linearizes first if it must).
type ReadFunc func(fn func(revision.Reader) error) error

// RangeStream serves a validated RangeStream request in chunks through
// send, as etcd 3.7 pages it: chunks of 10 keys, then doubling (below
// maxBytes/2) or halving (above 2×maxBytes) the limit; the read revision is
// pinned at the first chunk; the last chunk alone carries the header
// revision, More and Count. Each chunk is one call of read. It stops at
// ctx's end or send's first error.
func RangeStream(ctx context.Context, req *pb.RangeRequest, maxBytes int, read ReadFunc, send func(*pb.RangeResponse) error) error {
	r := proto.Clone(req).(*pb.RangeRequest)
	chunk := func() (*pb.RangeResponse, error) {
		var resp *pb.RangeResponse
		err := read(func(rd revision.Reader) error {
			var err error
			resp, err = RangeChunk(rd, r)
			return err
		})
		return resp, err
	}
	if r.CountOnly {
		resp, err := chunk()
		if err != nil {
			return err
		}
		return send(&pb.RangeResponse{Header: &pb.ResponseHeader{Revision: resp.Header.Revision}, Count: resp.Count})
	}
	total := r.Limit
	if total == 0 {
		total = math.MaxInt64
	}
	r.Limit = min(int64(initialStreamChunk), total)
	var count, headerRev int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		resp, err := chunk()
		if err != nil {
			return err
		}
		if headerRev == 0 {
			headerRev = resp.Header.Revision
			if r.Revision == 0 {
				r.Revision = headerRev
			}
		}
		count += int64(len(resp.Kvs))
		var next []byte
		if resp.More {
			last := resp.Kvs[len(resp.Kvs)-1].Key
			next = append(append(make([]byte, 0, len(last)+1), last...), 0)
		}
		out := &pb.RangeResponse{Kvs: resp.Kvs}
		done := !resp.More || count == total
		if done {
			out.Header = &pb.ResponseHeader{Revision: headerRev}
			out.More = resp.More
			out.Count = count
			if resp.More {
				var rest int64
				err := read(func(rd revision.Reader) error {
					var err error
					rest, err = Count(rd, next, r.RangeEnd, r.Revision)
					return err
				})
				if err != nil {
					return err
				}
				out.Count += rest
			}
		}
		if err := send(out); err != nil {
			return err
		}
		if done {
			return nil
		}
		r.Key = next
		size := proto.Size(resp)
		switch {
		case size < maxBytes/2:
			r.Limit *= 2
		case size > maxBytes*2:
			r.Limit /= 2
		}
		r.Limit = max(1, min(r.Limit, total-count))
	}
}
