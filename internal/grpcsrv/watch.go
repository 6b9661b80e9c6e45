package grpcsrv

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/translate"
	"github.com/zketcd/zketcd/internal/watchbridge"
)

// ctrlStreamBufLen is the buffer of control responses (created, canceled).
const ctrlStreamBufLen = 16

// leaderLossGrace is how long an instance may be unhealthy before watch
// streams that require a leader are canceled with ErrNoLeader.
const leaderLossGrace = 3 * time.Second

// Watches is the engine's watch side.
type Watches interface {
	Health
	// State is the view's applied position; its CompactRev decides which
	// events still carry prev_kv.
	State() revision.State
	// NewWatchStream opens a stream on the watch hub with at most
	// maxWatchers watchers (0: no bound).
	NewWatchStream(maxWatchers int) *watchbridge.Stream
	// Servable is nil while the instance serves, etcd's corrupt-cluster
	// error once it halted for good (its history is no longer the
	// cluster's: no stream is opened on it).
	Servable() error
	// Health's Halted: open streams end when the instance halts.
	Halted() <-chan struct{}
}

type watchServer struct {
	pb.UnsafeWatchServer
	be               Watches
	hdr              header
	lg               *logrus.Entry
	maxRequestBytes  int
	progressInterval time.Duration
	stop             <-chan struct{} // closed when the server shuts down
	maxWatchers      int
	authz            *authorizer // nil: no permission checks
}

var _ pb.WatchServer = (*watchServer)(nil)

// serverWatchStream serves one gRPC watch stream: recvLoop turns requests
// into hub calls, sendLoop sends control responses and events in order.
type serverWatchStream struct {
	srv    *watchServer
	grpc   grpc.BidiStreamingServer[pb.WatchRequest, pb.WatchResponse]
	ws     *watchbridge.Stream
	ctrl   chan *pb.WatchResponse
	closec chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	progress map[int64]bool // watchers asking progress notify: true = nothing sent since the last tick
	prevKV   map[int64]bool
	fragment map[int64]bool
}

func (s *watchServer) Watch(stream grpc.BidiStreamingServer[pb.WatchRequest, pb.WatchResponse]) error {
	if s.be.Servable() != nil {
		return rpctypes.ErrGRPCCorrupt // halted: its history is not the cluster's
	}
	sws := &serverWatchStream{
		srv:      s,
		grpc:     stream,
		ws:       s.be.NewWatchStream(s.maxWatchers),
		ctrl:     make(chan *pb.WatchResponse, ctrlStreamBufLen),
		closec:   make(chan struct{}),
		progress: map[int64]bool{},
		prevKV:   map[int64]bool{},
		fragment: map[int64]bool{},
	}
	sws.wg.Add(1)
	go func() {
		defer sws.wg.Done()
		sws.sendLoop()
	}()
	errc := make(chan error, 1)
	go func() {
		if err := sws.recvLoop(); err != nil {
			errc <- err
		}
	}()
	var leaderLost <-chan struct{}
	if requiresLeader(stream.Context()) {
		leaderLost = s.watchLeader(stream.Context(), sws.closec)
	}
	var err error
	select {
	case err = <-errc:
		if errors.Is(err, context.Canceled) {
			err = rpctypes.ErrGRPCWatchCanceled
		}
		close(sws.ctrl)
	case <-stream.Context().Done():
		err = stream.Context().Err()
		if errors.Is(err, context.Canceled) {
			err = rpctypes.ErrGRPCWatchCanceled
		}
	case <-leaderLost:
		err = rpctypes.ErrGRPCNoLeader
	case <-s.be.Halted():
		err = rpctypes.ErrGRPCCorrupt
	case <-s.stop:
		// Shutting down: end the stream now (a graceful stop would wait for
		// it forever), so the client resumes on another endpoint at once.
		err = rpctypes.ErrGRPCStopped
	}
	sws.ws.Close()
	close(sws.closec)
	sws.wg.Wait()
	return err
}

// requiresLeader reports whether the client asked (clientv3's
// WithRequireLeader, used by kube-apiserver) to end the stream when the
// server loses its leader.
func requiresLeader(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return false
	}
	vs := md.Get(rpctypes.MetadataRequireLeaderKey)
	return len(vs) > 0 && vs[0] == rpctypes.MetadataHasLeader
}

// watchLeader closes the returned channel once the instance has been
// unhealthy (no ZooKeeper session, or a stale view) for leaderLossGrace.
func (s *watchServer) watchLeader(ctx context.Context, done <-chan struct{}) <-chan struct{} {
	lost := make(chan struct{})
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		var since time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-t.C:
			}
			if s.be.Health() == nil {
				since = time.Time{}
				continue
			}
			if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) >= leaderLossGrace {
				close(lost)
				return
			}
		}
	}()
	return lost
}

func (sws *serverWatchStream) header(rev int64) *pb.ResponseHeader {
	h := &pb.ResponseHeader{Revision: rev}
	sws.srv.hdr.fillWithoutRevision(h)
	return h
}

func (sws *serverWatchStream) sendCtrl(wr *pb.WatchResponse) bool {
	select {
	case sws.ctrl <- wr:
		return true
	case <-sws.closec:
		return false
	}
}

func (sws *serverWatchStream) recvLoop() error {
	for {
		req, err := sws.grpc.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch uv := req.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			if uv.CreateRequest == nil {
				continue
			}
			if !sws.create(uv.CreateRequest) {
				return nil
			}
		case *pb.WatchRequest_CancelRequest:
			if uv.CancelRequest == nil {
				continue
			}
			id := uv.CancelRequest.WatchId
			if err := sws.ws.Cancel(id); err == nil {
				if !sws.sendCtrl(&pb.WatchResponse{Header: sws.header(sws.ws.Rev()), WatchId: id, Canceled: true}) {
					return nil
				}
				sws.mu.Lock()
				delete(sws.progress, id)
				delete(sws.prevKV, id)
				delete(sws.fragment, id)
				sws.mu.Unlock()
			}
		case *pb.WatchRequest_ProgressRequest:
			if uv.ProgressRequest != nil {
				sws.ws.RequestProgressAll()
			}
		default:
			sws.srv.lg.Debugf("ignoring watch request of type %T", uv)
		}
	}
}

// create handles a create request; it returns false if the stream closed.
func (sws *serverWatchStream) create(creq *pb.WatchCreateRequest) bool {
	if reason := sws.srv.authz.watchCreate(sws.grpc.Context(), creq); reason != "" {
		return sws.sendCtrl(&pb.WatchResponse{
			Header: sws.header(sws.ws.Rev()), WatchId: watchbridge.InvalidWatchID,
			Created: true, Canceled: true, CancelReason: reason,
		})
	}
	key := creq.Key
	if len(key) == 0 {
		key = []byte{0} // the smallest key
	}
	if creq.StartRevision < 0 {
		return sws.sendCtrl(&pb.WatchResponse{
			Header: sws.header(sws.ws.Rev()), WatchId: watchbridge.InvalidWatchID,
			Created: true, Canceled: true, CancelReason: rpctypes.ErrCompacted.Error(),
		})
	}
	end := translate.EndKey(creq.RangeEnd)
	var filters []watchbridge.Filter
	for _, f := range creq.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			filters = append(filters, watchbridge.FilterNoPut)
		case pb.WatchCreateRequest_NODELETE:
			filters = append(filters, watchbridge.FilterNoDelete)
		}
	}
	id, err := sws.ws.Watch(creq.WatchId, key, end, creq.StartRevision, filters...)
	if errors.Is(err, watchbridge.ErrStreamClosed) {
		// The stream is ending (shutdown, halt, lost leader): the client
		// gets that error and re-creates the watch from where it was, on
		// this or another endpoint. Answering the create as canceled would
		// tell it the watch was refused.
		return false
	}
	if err == nil {
		sws.mu.Lock()
		if creq.ProgressNotify {
			sws.progress[id] = true
		}
		if creq.PrevKv {
			sws.prevKV[id] = true
		}
		if creq.Fragment {
			sws.fragment[id] = true
		}
		sws.mu.Unlock()
	} else {
		id = watchbridge.InvalidWatchID
	}
	wr := &pb.WatchResponse{Header: sws.header(sws.ws.Rev()), WatchId: id, Created: true, Canceled: err != nil}
	if err != nil {
		wr.CancelReason = err.Error()
	}
	return sws.sendCtrl(wr)
}

// progressInterval returns the configured interval plus up to 10% jitter,
// as etcd does, so that streams do not tick together.
func (sws *serverWatchStream) progressInterval() time.Duration {
	iv := sws.srv.progressInterval
	return iv + time.Duration(rand.Int64N(int64(iv)/10+1))
}

func (sws *serverWatchStream) sendLoop() {
	ids := map[int64]struct{}{}
	// Responses of watchers whose created response is not sent yet, kept
	// as the hub sent them: prev_kv and fragment are looked up when they
	// are sent, after create recorded them.
	pending := map[int64][]watchbridge.Response{}
	ticker := time.NewTicker(sws.progressInterval())
	defer ticker.Stop()
	for {
		select {
		case wresp, ok := <-sws.ws.Chan():
			if !ok {
				return
			}
			if wresp.WatchID != watchbridge.InvalidWatchID {
				if _, known := ids[wresp.WatchID]; !known {
					pending[wresp.WatchID] = append(pending[wresp.WatchID], wresp)
					continue
				}
			}
			if err := sws.send(wresp); err != nil {
				sws.srv.lg.WithError(err).Debug("send watch response")
				return
			}
		case c, ok := <-sws.ctrl:
			if !ok {
				return
			}
			if err := sws.grpc.Send(c); err != nil {
				sws.srv.lg.WithError(err).Debug("send watch control response")
				return
			}
			if c.Canceled && c.WatchId != watchbridge.InvalidWatchID {
				delete(ids, c.WatchId)
				continue
			}
			if c.Created {
				ids[c.WatchId] = struct{}{}
				for _, wresp := range pending[c.WatchId] {
					if err := sws.send(wresp); err != nil {
						sws.srv.lg.WithError(err).Debug("send watch response")
						return
					}
				}
				delete(pending, c.WatchId)
			}
		case <-ticker.C:
			sws.mu.Lock()
			for id, quiet := range sws.progress {
				if quiet {
					sws.ws.RequestProgress(id)
				}
				sws.progress[id] = true
			}
			sws.mu.Unlock()
		case <-sws.closec:
			return
		}
	}
}

// send converts a hub response for its watcher's options and sends it.
func (sws *serverWatchStream) send(wresp watchbridge.Response) error {
	sws.mu.Lock()
	needPrev := sws.prevKV[wresp.WatchID]
	fragmented := sws.fragment[wresp.WatchID]
	sws.mu.Unlock()
	// etcd reads each prev_kv at mod_revision-1 as it sends the event;
	// below the compacted revision that read fails and the event goes
	// without prev_kv. Do the same.
	prevFloor := int64(-1)
	if needPrev && len(wresp.Events) > 0 {
		prevFloor = sws.srv.be.State().CompactRev
	}
	wr := &pb.WatchResponse{
		Header:          sws.header(wresp.Revision),
		WatchId:         wresp.WatchID,
		Events:          toPBEvents(wresp.Events, needPrev, prevFloor),
		CompactRevision: wresp.CompactRevision,
		Canceled:        wresp.CompactRevision != 0,
	}
	var err error
	if fragmented {
		// etcd's threshold is --max-request-bytes plus the gRPC overhead it
		// allows on requests.
		err = sendFragments(wr, sws.srv.maxRequestBytes+grpcOverheadBytes, sws.grpc.Send)
	} else {
		err = sws.grpc.Send(wr)
	}
	if err != nil {
		return err
	}
	if len(wresp.Events) > 0 {
		sws.mu.Lock()
		if sws.progress[wresp.WatchID] {
			sws.progress[wresp.WatchID] = false
		}
		sws.mu.Unlock()
	}
	return nil
}

// toPBEvents converts events; with prevKV, each non-create event carries the
// key's previous version unless mod_revision-1 is below prevFloor (the
// compacted revision).
func toPBEvents(evs []revision.Event, prevKV bool, prevFloor int64) []*mvccpb.Event {
	if len(evs) == 0 {
		return nil
	}
	out := make([]*mvccpb.Event, len(evs))
	for i, ev := range evs {
		e := &mvccpb.Event{}
		if ev.Type == revision.EventDelete {
			e.Type = mvccpb.Event_DELETE
			e.Kv = &mvccpb.KeyValue{Key: ev.KV.Key, ModRevision: ev.KV.ModRevision}
		} else {
			e.Kv = translate.ToPB(ev.KV)
		}
		isCreate := e.Type == mvccpb.Event_PUT && e.Kv.CreateRevision == e.Kv.ModRevision
		if prevKV && !isCreate && ev.PrevKV != nil && ev.KV.ModRevision-1 >= prevFloor {
			e.PrevKv = translate.ToPB(ev.PrevKV)
		}
		out[i] = e
	}
	return out
}

// sendFragments splits a response whose size reaches maxBytes into
// fragments (Fragment set on all but the last), never splitting an event.
func sendFragments(wr *pb.WatchResponse, maxBytes int, send func(*pb.WatchResponse) error) error {
	if proto.Size(wr) < maxBytes || len(wr.Events) < 2 {
		return send(wr)
	}
	idx := 0
	for {
		cur := &pb.WatchResponse{
			Header: wr.Header, WatchId: wr.WatchId, Created: wr.Created, Canceled: wr.Canceled,
			CompactRevision: wr.CompactRevision, CancelReason: wr.CancelReason,
			Fragment: true, Events: make([]*mvccpb.Event, 0),
		}
		for _, ev := range wr.Events[idx:] {
			cur.Events = append(cur.Events, ev)
			if len(cur.Events) > 1 && proto.Size(cur) >= maxBytes {
				cur.Events = cur.Events[:len(cur.Events)-1]
				break
			}
			idx++
		}
		if idx == len(wr.Events) {
			cur.Fragment = false
		}
		if err := send(cur); err != nil {
			return err
		}
		if !cur.Fragment {
			return nil
		}
	}
}
