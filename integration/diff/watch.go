package diff

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// DefaultWatchWait bounds how long one Await of a Watch step waits.
const DefaultWatchWait = 10 * time.Second

// watchConn is one raw gRPC Watch stream of an endpoint. It stays open
// across steps, so that a scenario can create watchers, write with ordinary
// steps and collect the resulting responses in a later Watch step. A
// goroutine receives into an unbounded queue; steps take from its head.
type watchConn struct {
	stream pb.Watch_WatchClient
	cancel context.CancelFunc

	mu     sync.Mutex
	queue  []*pb.WatchResponse
	err    error         // the stream's terminal error (io.EOF included)
	signal chan struct{} // closed and replaced whenever queue or err changes
}

func openWatch(e *endpoint) (*watchConn, error) {
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := pb.NewWatchClient(e.client.ActiveConnection()).Watch(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	wc := &watchConn{stream: stream, cancel: cancel, signal: make(chan struct{})}
	go wc.recvLoop()
	return wc, nil
}

func (wc *watchConn) recvLoop() {
	for {
		resp, err := wc.stream.Recv()
		wc.mu.Lock()
		if err != nil {
			wc.err = err
		} else {
			wc.queue = append(wc.queue, resp)
		}
		close(wc.signal)
		wc.signal = make(chan struct{})
		wc.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// next returns the oldest unread response, or the stream's error, waiting
// until deadline; it returns (nil, nil) on timeout.
func (wc *watchConn) next(deadline time.Time) (*pb.WatchResponse, error) {
	for {
		wc.mu.Lock()
		if len(wc.queue) > 0 {
			r := wc.queue[0]
			wc.queue = wc.queue[1:]
			wc.mu.Unlock()
			return r, nil
		}
		err, sig := wc.err, wc.signal
		wc.mu.Unlock()
		if err != nil {
			return nil, err
		}
		d := time.Until(deadline)
		if d <= 0 {
			return nil, nil
		}
		t := time.NewTimer(d)
		select {
		case <-sig:
			t.Stop()
		case <-t.C:
			return nil, nil
		}
	}
}

func (wc *watchConn) close() { wc.cancel() }

// closeWatches ends every watch stream the scenario opened on e.
func (e *endpoint) closeWatches() {
	for _, wc := range e.watches {
		wc.close()
	}
	e.watches = nil
}

// WatchAction is one action of a Watch step: a request sent on the stream,
// a wait for responses, or an option of the step.
type WatchAction struct {
	send    *pb.WatchRequest
	await   *Until
	closing bool
	option  func(*watchOptions)
}

type watchOptions struct {
	groupByID    bool
	dropProgress bool
	wait         time.Duration
}

// Send sends req unchanged on the stream.
func Send(req *pb.WatchRequest) WatchAction { return WatchAction{send: req} }

// Create sends a create request.
func Create(cr *pb.WatchCreateRequest) WatchAction {
	return Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}})
}

// CancelWatch sends a cancel request for watch id.
func CancelWatch(id int64) WatchAction {
	return Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
		CancelRequest: &pb.WatchCancelRequest{WatchId: id}}})
}

// RequestProgress sends a progress request (a response with watch ID -1 at
// the current revision if every watcher of the stream is synced).
func RequestProgress() WatchAction {
	return Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{
		ProgressRequest: &pb.WatchProgressRequest{}}})
}

// Await collects responses until u holds on the responses collected by the
// step so far. The step fails (with an error compared like any other) if u
// does not hold within the step's wait.
func Await(u Until) WatchAction { return WatchAction{await: &u} }

// CloseStream collects responses for quiet (they are part of the step's
// result: anything unexpected shows up there) and then ends the stream.
func CloseStream(quiet time.Duration) WatchAction {
	return WatchAction{await: ptrUntil(Quiet(quiet)), closing: true}
}

// GroupByWatchID makes the step's result order its responses by watch ID
// (stably: the order of each watcher's own responses is kept). Use it when
// several watchers of one stream receive responses in the same wait: the
// interleaving of different watchers is not specified by etcd.
func GroupByWatchID() WatchAction {
	return WatchAction{option: func(o *watchOptions) { o.groupByID = true }}
}

// DropProgress leaves out of the step's result the progress notifications
// sent by the server's periodic ticker or by RequestProgress: responses
// without events that neither create nor cancel a watcher. Their number
// depends on timing. Await conditions still see them (Quiet ignores them).
func DropProgress() WatchAction {
	return WatchAction{option: func(o *watchOptions) { o.dropProgress = true }}
}

// WaitAtMost sets how long each Await of the step may wait (default
// DefaultWatchWait).
func WaitAtMost(d time.Duration) WatchAction {
	return WatchAction{option: func(o *watchOptions) { o.wait = d }}
}

// Until is a condition on the responses a Watch step collected.
type Until struct {
	desc  string
	quiet time.Duration // > 0: holds once no response arrived for quiet
	done  func(rs []*pb.WatchResponse) bool
}

func ptrUntil(u Until) *Until { return &u }

// Responses holds once n responses were collected.
func Responses(n int) Until {
	return Until{desc: fmt.Sprintf("%d responses", n), done: func(rs []*pb.WatchResponse) bool { return len(rs) >= n }}
}

// Events holds once the responses for watch id carry n events in total.
func Events(id int64, n int) Until {
	return Until{desc: fmt.Sprintf("%d events for watch %d", n, id), done: func(rs []*pb.WatchResponse) bool {
		got := 0
		for _, r := range rs {
			if r.WatchId == id {
				got += len(r.Events)
			}
		}
		return got >= n
	}}
}

// Progress holds once a progress notification for watch id (-1: for the
// whole stream) arrived.
func Progress(id int64) Until {
	return Until{desc: fmt.Sprintf("progress notification for watch %d", id), done: func(rs []*pb.WatchResponse) bool {
		for _, r := range rs {
			if r.WatchId == id && IsProgress(r) {
				return true
			}
		}
		return false
	}}
}

// Quiet holds once no response arrived for d (it never fails).
func Quiet(d time.Duration) Until {
	return Until{desc: fmt.Sprintf("quiet for %v", d), quiet: d}
}

// IsProgress reports whether r is a progress notification: no events, and
// neither a created nor a canceled response.
func IsProgress(r *pb.WatchResponse) bool {
	return len(r.Events) == 0 && !r.Created && !r.Canceled && r.CompactRevision == 0
}

// Watch is a step on the raw gRPC watch stream called name, opened on first
// use and kept open until CloseStream or the end of the scenario. Its
// actions run in order: requests are sent unchanged (pb.WatchClient, not
// clientv3, so that every field and every response is seen), and Awaits
// collect responses. The step's result holds the responses it collected, in
// arrival order (see GroupByWatchID), and its request is the first request
// it sent. Writes are ordinary steps placed between Watch steps.
func Watch(name string, actions ...WatchAction) Step {
	opts := watchOptions{wait: DefaultWatchWait}
	for _, a := range actions {
		if a.option != nil {
			a.option(&opts)
		}
	}
	kind := "Watch " + name
	return Step{kind: kind, exec: func(ctx context.Context, e *endpoint) Result {
		var res Result
		wc := e.watches[name]
		if wc == nil {
			var err error
			if wc, err = openWatch(e); err != nil {
				res.Err = err
				return res
			}
			if e.watches == nil {
				e.watches = map[string]*watchConn{}
			}
			e.watches[name] = wc
		}
		var got []*pb.WatchResponse
		for _, a := range actions {
			switch {
			case a.send != nil:
				if res.Request == nil {
					res.Request = a.send
				}
				if err := wc.stream.Send(a.send); err != nil {
					res.Err = err
					return finishWatch(res, got, opts)
				}
			case a.await != nil:
				var err error
				got, err = awaitResponses(ctx, wc, got, *a.await, opts)
				if err != nil {
					res.Err = err
					return finishWatch(res, got, opts)
				}
				if a.closing {
					wc.close()
					delete(e.watches, name)
				}
			}
		}
		return finishWatch(res, got, opts)
	}}
}

func awaitResponses(ctx context.Context, wc *watchConn, got []*pb.WatchResponse, u Until, opts watchOptions) ([]*pb.WatchResponse, error) {
	deadline := time.Now().Add(opts.wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	quietUntil := time.Now().Add(u.quiet)
	for {
		if u.done != nil && u.done(got) {
			return got, nil
		}
		wait := deadline
		if u.quiet > 0 && quietUntil.Before(deadline) {
			wait = quietUntil
		}
		r, err := wc.next(wait)
		if err != nil {
			return got, fmt.Errorf("watch stream ended while waiting for %s: %w", u.desc, err)
		}
		if r == nil {
			if u.quiet > 0 && !time.Now().Before(quietUntil) {
				return got, nil
			}
			return got, fmt.Errorf("watch: %s not reached within %v (%d responses)", u.desc, opts.wait, len(got))
		}
		got = append(got, r)
		if !opts.dropProgress || !IsProgress(r) {
			quietUntil = time.Now().Add(u.quiet) // dropped progress does not break the silence
		}
	}
}

func finishWatch(res Result, got []*pb.WatchResponse, opts watchOptions) Result {
	if opts.dropProgress {
		got = slices.DeleteFunc(got, IsProgress)
	}
	if opts.groupByID {
		slices.SortStableFunc(got, func(a, b *pb.WatchResponse) int {
			switch {
			case a.WatchId < b.WatchId:
				return -1
			case a.WatchId > b.WatchId:
				return 1
			}
			return 0
		})
	}
	for _, r := range got {
		res.Responses = append(res.Responses, r)
	}
	return res
}

// WatchResponses returns the watch responses of a result.
func WatchResponses(r Result) []*pb.WatchResponse {
	var out []*pb.WatchResponse
	for _, m := range r.Responses {
		if w, ok := m.(*pb.WatchResponse); ok {
			out = append(out, w)
		}
	}
	return out
}

// SummarizeWatch renders watch responses one line each, for expectations
// and reports:
//
//	created id=0 rev=5
//	created id=-1 rev=5 canceled "mvcc: watcher range is empty"
//	canceled id=0 rev=5
//	compacted id=0 compact=4 rev=0
//	progress id=-1 rev=7
//	id=0 rev=7: PUT a=1 c6 m7 v2 prev(a=0 c6 m6 v1), DELETE b m7 [fragment]
func SummarizeWatch(rs []*pb.WatchResponse) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = summarizeResponse(r)
	}
	return out
}

func summarizeResponse(r *pb.WatchResponse) string {
	rev := r.GetHeader().GetRevision()
	var s string
	switch {
	case r.Created:
		s = fmt.Sprintf("created id=%d rev=%d", r.WatchId, rev)
		if r.Canceled {
			s += fmt.Sprintf(" canceled %q", r.CancelReason)
		}
	case r.CompactRevision != 0:
		s = fmt.Sprintf("compacted id=%d compact=%d rev=%d", r.WatchId, r.CompactRevision, rev)
	case r.Canceled:
		s = fmt.Sprintf("canceled id=%d rev=%d", r.WatchId, rev)
		if r.CancelReason != "" {
			s += fmt.Sprintf(" %q", r.CancelReason)
		}
	case len(r.Events) == 0:
		s = fmt.Sprintf("progress id=%d rev=%d", r.WatchId, rev)
	default:
		evs := make([]string, len(r.Events))
		for i, ev := range r.Events {
			evs[i] = summarizeEvent(ev)
		}
		s = fmt.Sprintf("id=%d rev=%d: %s", r.WatchId, rev, strings.Join(evs, ", "))
	}
	if r.Fragment {
		s += " [fragment]"
	}
	return s
}

func summarizeEvent(ev *mvccpb.Event) string {
	kv := ev.Kv
	if ev.Type == mvccpb.DELETE {
		s := fmt.Sprintf("DELETE %s m%d", shortBytes(kv.Key), kv.ModRevision)
		if kv.Value != nil || kv.Version != 0 || kv.CreateRevision != 0 {
			s += fmt.Sprintf(" (value %s c%d v%d)", shortBytes(kv.Value), kv.CreateRevision, kv.Version)
		}
		if ev.PrevKv != nil {
			s += " prev(" + summarizeKV(ev.PrevKv) + ")"
		}
		return s
	}
	s := "PUT " + summarizeKV(kv)
	if ev.PrevKv != nil {
		s += " prev(" + summarizeKV(ev.PrevKv) + ")"
	}
	return s
}

func summarizeKV(kv *mvccpb.KeyValue) string {
	s := fmt.Sprintf("%s=%s c%d m%d v%d", shortBytes(kv.Key), shortBytes(kv.Value), kv.CreateRevision, kv.ModRevision, kv.Version)
	if kv.Lease != 0 {
		s += fmt.Sprintf(" lease=%x", kv.Lease)
	}
	return s
}

func shortBytes(b []byte) string {
	if len(b) > 32 {
		return fmt.Sprintf("<%d bytes %q…>", len(b), b[:8])
	}
	return fmt.Sprintf("%q", b)
}

// wantWatch expects the step's watch responses, summarized by
// SummarizeWatch, to be exactly want.
func wantWatch(want ...string) func(*State, Result) error {
	return func(_ *State, r Result) error {
		if r.Err != nil {
			return fmt.Errorf("unexpected error %v", errorInfoOf(r.Err))
		}
		got := SummarizeWatch(WatchResponses(r))
		if !slices.Equal(got, want) {
			return fmt.Errorf("watch responses\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		return nil
	}
}
