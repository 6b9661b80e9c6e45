package watchcheck

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Spec describes what a watch watches.
type Spec struct {
	// Name identifies the watch in reports.
	Name string
	// Key and End select [Key, End): End "" watches the key alone, End
	// "\x00" every key from Key on; clientv3.GetPrefixRangeEnd(Key) makes a
	// prefix watch.
	Key, End string
	// PrevKV asks for prev_kv; NoPut and NoDelete filter events out.
	PrevKV, NoPut, NoDelete bool
}

func (s Spec) matches(key string) bool {
	switch s.End {
	case "":
		return key == s.Key
	case "\x00":
		return key >= s.Key
	}
	return key >= s.Key && key < s.End
}

func (s Spec) wants(ev expEvent) bool {
	if !s.matches(string(ev.kv.Key)) {
		return false
	}
	if ev.delete {
		return !s.NoDelete
	}
	return !s.NoPut
}

// Response is one watch response as the client saw it (fragments merged).
type Response struct {
	// Revision is the response header's revision.
	Revision int64
	Events   []*mvccpb.Event
	// Progress marks a progress notification (no events, not created nor
	// canceled).
	Progress bool
	// Canceled, CompactRevision and Err describe a cancel.
	Canceled        bool
	CompactRevision int64
	Err             string
	// At is when the response was received.
	At time.Time
}

// FromClient converts a clientv3 watch response.
func FromClient(wr clientv3.WatchResponse, at time.Time) Response {
	r := Response{
		Progress:        wr.IsProgressNotify(),
		Canceled:        wr.Canceled,
		CompactRevision: wr.CompactRevision,
		Revision:        wr.Header.Revision,
		At:              at,
	}
	if err := wr.Err(); err != nil {
		r.Err = err.Error()
	}
	for _, ev := range wr.Events {
		r.Events = append(r.Events, proto.Clone((*mvccpb.Event)(ev)).(*mvccpb.Event))
	}
	return r
}

// FromPB converts the raw gRPC watch responses of one watcher into
// Responses, merging fragments as clientv3 does. Created responses are left
// out.
func FromPB(rs []*pb.WatchResponse, at time.Time) []Response {
	var out []Response
	var cur *pb.WatchResponse
	for _, r := range rs {
		if r.Created {
			continue
		}
		if cur == nil {
			cur = proto.Clone(r).(*pb.WatchResponse)
		} else {
			cur.Events = append(cur.Events, r.Events...)
			cur.Fragment = r.Fragment
		}
		if cur.Fragment {
			continue
		}
		resp := Response{
			Revision:        cur.GetHeader().GetRevision(),
			Events:          cur.Events,
			Canceled:        cur.Canceled,
			CompactRevision: cur.CompactRevision,
			Err:             cur.CancelReason,
			At:              at,
		}
		resp.Progress = len(cur.Events) == 0 && !cur.Canceled && cur.CompactRevision == 0
		out = append(out, resp)
		cur = nil
	}
	return out
}

// Segment is one watch request's responses: the first from the watch's
// start revision, each later one from where the previous one stopped.
type Segment struct {
	Start     int64
	Responses []Response
	// End is why the segment ended (nil if it was stopped by the test).
	End error
}

// Watch is a recorded watch: what it watches and its segments.
type Watch struct {
	Spec
	Segments []*Segment
}

// Recorder records a clientv3 watch into a Watch. When the watch channel
// closes (the server canceled it: compaction, no leader, or the client's
// retries gave up), it re-watches from the revision after the last one
// observed, as a new Segment. clientv3 itself resumes a watch whose stream
// broke (a restarted server) without closing the channel; that resume is
// checked too, since it is seen as one segment.
type Recorder struct {
	c      *clientv3.Client
	spec   Spec
	opts   RecordOptions
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	w        Watch
	observed int64         // highest revision observed: event or progress
	changed  chan struct{} // closed and replaced at every response
	restart  context.CancelFunc
}

// RecordOptions tune a Recorder.
type RecordOptions struct {
	// RequireLeader watches with clientv3.WithRequireLeader: the server
	// cancels the watch when it has no leader (zketcd: no healthy ZooKeeper
	// session) and the recorder re-watches.
	RequireLeader bool
	// ProgressNotify asks for periodic progress notifications.
	ProgressNotify bool
	// Fragment asks for fragmented responses (clientv3 merges them).
	Fragment bool
	// SharedStream puts the watch on the client's default watch stream;
	// by default each recorder has a stream of its own, so that progress
	// requests answer for it alone.
	SharedStream bool
}

// Record starts recording a watch of spec from revision start (which must
// be explicit: the checker needs it). Stop it with Stop.
func Record(c *clientv3.Client, spec Spec, start int64, opts RecordOptions) *Recorder {
	if start <= 0 {
		panic("watchcheck: Record needs an explicit start revision")
	}
	ctx, cancel := context.WithCancel(context.Background())
	if !opts.SharedStream {
		ctx = metadata.AppendToOutgoingContext(ctx, "watchcheck-stream", spec.Name)
	}
	if opts.RequireLeader {
		ctx = clientv3.WithRequireLeader(ctx)
	}
	r := &Recorder{c: c, spec: spec, opts: opts, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		w: Watch{Spec: spec}, changed: make(chan struct{}), observed: start - 1}
	go r.run(start)
	return r
}

func (r *Recorder) clientOpts(rev int64) []clientv3.OpOption {
	opts := []clientv3.OpOption{clientv3.WithRev(rev)}
	switch r.spec.End {
	case "":
	case "\x00":
		opts = append(opts, clientv3.WithFromKey())
	default:
		opts = append(opts, clientv3.WithRange(r.spec.End))
	}
	if r.spec.PrevKV {
		opts = append(opts, clientv3.WithPrevKV())
	}
	if r.spec.NoPut {
		opts = append(opts, clientv3.WithFilterPut())
	}
	if r.spec.NoDelete {
		opts = append(opts, clientv3.WithFilterDelete())
	}
	if r.opts.ProgressNotify {
		opts = append(opts, clientv3.WithProgressNotify())
	}
	if r.opts.Fragment {
		opts = append(opts, clientv3.WithFragment())
	}
	return opts
}

func (r *Recorder) run(start int64) {
	defer close(r.done)
	next := start
	for r.ctx.Err() == nil {
		seg := &Segment{Start: next}
		wctx, cancel := context.WithCancel(r.ctx)
		r.mu.Lock()
		r.w.Segments = append(r.w.Segments, seg)
		r.restart = cancel
		r.mu.Unlock()
		compacted := int64(0)
		for wr := range r.c.Watch(wctx, r.spec.Key, r.clientOpts(next)...) {
			resp := FromClient(wr, time.Now())
			r.mu.Lock()
			seg.Responses = append(seg.Responses, resp)
			for _, ev := range resp.Events {
				r.observed = max(r.observed, ev.Kv.ModRevision)
			}
			if resp.Progress {
				r.observed = max(r.observed, resp.Revision)
			}
			if wr.Canceled {
				seg.End = wr.Err()
				if seg.End == nil {
					seg.End = errors.New("canceled")
				}
				compacted = wr.CompactRevision
			}
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
		}
		cancel()
		r.mu.Lock()
		if seg.End == nil && r.ctx.Err() == nil && wctx.Err() != nil {
			seg.End = errors.New("restarted by the test")
		}
		next = max(r.observed+1, compacted)
		r.mu.Unlock()
		select {
		case <-r.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Restart ends the current watch request; the recorder re-watches from the
// revision after the last one observed (the resumable guarantee).
func (r *Recorder) Restart() {
	r.mu.Lock()
	cancel := r.restart
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Observed returns the highest revision the watch observed: its last
// event's or progress notification's.
func (r *Recorder) Observed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.observed
}

// WaitObserved waits until the watch observed revision rev, asking the
// server for progress notifications while it waits (a watch that sees no
// event at rev learns it from a progress notification).
func (r *Recorder) WaitObserved(ctx context.Context, rev int64) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		r.mu.Lock()
		obs, ch := r.observed, r.changed
		r.mu.Unlock()
		if obs >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-tick.C:
			// Errors (no stream yet, stream broken) are retried.
			_ = r.c.RequestProgress(r.ctx)
		case <-ctx.Done():
			return fmt.Errorf("watch %s: observed revision %d, want %d: %w", r.spec.Name, obs, rev, ctx.Err())
		}
	}
}

// RequestProgress asks the server for a progress notification on the
// recorder's stream (answered only while every watcher of the stream is
// synced).
func (r *Recorder) RequestProgress() error { return r.c.RequestProgress(r.ctx) }

// Stop ends the recording and returns the recorded watch.
func (r *Recorder) Stop() *Watch {
	r.cancel()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.w
	return &w
}
