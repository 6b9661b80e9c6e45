package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/translate"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// chainLog records every commit's outcome by the hand-over channel it
// closes (CommitRequest.Sending), so that a test can check the pipeline's
// rule: a commit chained on another (Pipelined, After its Sending) lands
// only if that one landed.
type chainLog struct {
	*memlog.Client
	mu      sync.Mutex
	landed  map[<-chan struct{}]bool
	chained []chainedCommit
}

type chainedCommit struct {
	lsn   int64
	after <-chan struct{}
}

func newChainLog(c *memlog.Client) *chainLog {
	return &chainLog{Client: c, landed: map[<-chan struct{}]bool{}}
}

// record notes what became of req.
func (l *chainLog) record(req zkstore.CommitRequest, res zkstore.CommitResult, err error) {
	ok := err == nil && res.Outcome == zkstore.Committed
	l.mu.Lock()
	defer l.mu.Unlock()
	if req.Sending != nil {
		l.landed[req.Sending] = ok
	}
	if ok && req.Pipelined && req.After != nil {
		l.chained = append(l.chained, chainedCommit{lsn: req.Entry.LSN, after: req.After})
	}
}

// broken returns the chained commits that landed although the commit they
// were chained on did not.
func (l *chainLog) broken() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int64
	for _, c := range l.chained {
		if landed, known := l.landed[c.after]; known && !landed {
			out = append(out, c.lsn)
		}
	}
	return out
}

// resolveLog scripts the sequence of issue 33 on top of chainLog: a commit
// at a known marker version whose outcome is lost (nothing written), then
// the next commit — which sets the marker at any version — landing with its
// answer lost and resolved by its writer tag (sent again, as zkstore does),
// then the commit after that held until a commit chained on it arrives (or
// a while passes) and losing its position to another writer.
type resolveLog struct {
	*chainLog
	st       *memlog.Store
	phase    atomic.Int32
	held     chan struct{} // closed when the last commit is held
	arrived  chan struct{} // closed when a commit chained on it arrives
	arriveMu sync.Once
	resolved atomic.Pointer[zkstore.CommitResult]
}

func (l *resolveLog) Commit(ctx context.Context, req zkstore.CommitRequest) (zkstore.CommitResult, error) {
	switch {
	case l.phase.Load() == 3 && req.Pipelined:
		l.arriveMu.Do(func() { close(l.arrived) })
	case l.phase.Load() == 1 && req.Marker != nil && !req.Marker.Create:
		// The commit after the lost one: sent, landed, its answer lost;
		// sent again, it is found in the log by its writer tag.
		l.phase.Store(2)
		res, err := l.chainLog.Client.Commit(ctx, req)
		if err == nil && res.Outcome == zkstore.Committed {
			again := req
			again.After, again.Sending = nil, nil
			res, err = l.chainLog.Client.Commit(ctx, again)
			l.resolved.Store(&res)
		}
		l.record(req, res, err)
		l.phase.Store(3)
		return res, err
	case l.phase.Load() == 3 && req.Marker != nil:
		// The next commit: held until one is chained on it (or a while
		// passed: nothing may be chained on a marker version unknown),
		// then another writer takes its position.
		l.phase.Store(4)
		close(l.held)
		select {
		case <-l.arrived:
		case <-time.After(time.Second):
		}
		l.st.AppendForeignPut()
	}
	res, err := l.chainLog.Client.Commit(ctx, req)
	l.record(req, res, err)
	return res, err
}

// TestAMarkerVersionLearnedFromAResolvedCommitIsNeverGuessed: a flight
// that set the pipeline marker at any version (after a commit of unknown
// outcome) lands and its answer is lost; found in the log by its writer
// tag, it cannot tell the version it left. The committer must not take it
// for 0 (it is 1): a flight evaluated next and chained behind another on
// that guess would land although the one before it lost its position to
// another writer — evaluated on a state that never existed (here a Txn
// succeeding on a value no revision held).
func TestAMarkerVersionLearnedFromAResolvedCommitIsNeverGuessed(t *testing.T) {
	st := memlog.New(memlog.Options{})
	l := &resolveLog{chainLog: newChainLog(st.Client()), st: st, held: make(chan struct{}), arrived: make(chan struct{})}
	var lost atomic.Pointer[zkstore.CommitRequest]
	st.SetCommitFault(func(req zkstore.CommitRequest) memlog.Fault {
		if p := lost.Load(); p != nil && req.Entry.Writer == p.Entry.Writer {
			return memlog.UnknownLost
		}
		if l.phase.Load() == 0 && req.Marker != nil && !req.Marker.Create && req.Marker.Version != zkstore.AnyVersion {
			lost.Store(&req)
			l.phase.Store(1)
			return memlog.UnknownLost
		}
		return memlog.NoFault
	})
	b := newEngineOn(t, l, func(c *Config) { c.CommitPipeline = 4; c.CommitLinger = -1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	put(t, b, "k1", "v1") // creates the marker (version 0)
	if _, err := b.Put(ctx, &pb.PutRequest{Key: []byte("k2"), Value: []byte("lost")}); !errors.Is(err, rpctypes.ErrGRPCTimeoutDueToConnectionLost) {
		t.Fatalf("the put whose commit's outcome was lost: %v, want %v", err, rpctypes.ErrGRPCTimeoutDueToConnectionLost)
	}
	put(t, b, "k2", "v2") // sets the marker at any version; resolved
	if r := l.resolved.Load(); r == nil {
		t.Fatal("no commit was resolved by its writer tag")
	} else if !r.MarkerUnknown && r.MarkerVersion != 1 {
		t.Fatalf("the resolved commit reports the marker at %d, it is at 1", r.MarkerVersion)
	}

	errs := make(chan error, 2)
	go func() {
		_, err := b.Put(ctx, &pb.PutRequest{Key: []byte("k3"), Value: []byte("v3")})
		errs <- err
	}()
	select {
	case <-l.held:
	case <-ctx.Done():
		t.Fatal("the put of k3 was never committed")
	}
	var txn *pb.TxnResponse
	go func() {
		var err error
		txn, err = b.Txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte("k3"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL,
				TargetUnion: &pb.Compare_Value{Value: []byte("v3")}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k4"), Value: []byte("after k3")}}}},
		})
		errs <- err
	}()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if lsns := l.broken(); len(lsns) > 0 {
		t.Errorf("entries %v landed chained on a commit that did not land", lsns)
	}
	if txn.Succeeded {
		at, err := b.Range(ctx, &pb.RangeRequest{Key: []byte("k3"), Revision: txn.Header.Revision})
		if err != nil {
			t.Fatal(err)
		}
		if len(at.Kvs) != 1 || string(at.Kvs[0].Value) != "v3" {
			t.Errorf("the Txn succeeded on k3 = v3 at revision %d, where k3 is %v", txn.Header.Revision, at.Kvs)
		}
	}
	checkLogReplaysToView(t, st, b)
}

// newEngineOn starts an Engine named "a" on log.
func newEngineOn(t *testing.T, log Log, configure func(*Config)) *Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lg := testutil.Logger(logrus.ErrorLevel)
	cfg := Config{Name: "a", Logger: lg}
	if configure != nil {
		configure(&cfg)
	}
	b, err := New(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// TestADepthOfOneKeepsWhatTheCommitterKnowsOfTheMarker drives a committer
// of its own flight by flight through the automatic depth's moves: 2 (the
// marker created, then set 0 -> 1), 1 (no marker op), 2 again. The flight
// after the move back chains on the version the marker kept (1), not on
// "any version": a flight at any version has nothing chained on it, and
// one whose answer is lost would leave the version unknown.
func TestADepthOfOneKeepsWhatTheCommitterKnowsOfTheMarker(t *testing.T) {
	st := memlog.New(memlog.Options{})
	b, _ := engine(t, st, "a", nil) // its own committer stays idle: nothing is submitted to it
	c := newCommitter(b.core, b.tail, b.rb, b.origins, b.commit.marks)
	c.pace = newPacer(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, step := range []struct {
		limit int
		want  *zkstore.Marker
	}{
		{2, &zkstore.Marker{Name: c.marker, Create: true}},
		{2, &zkstore.Marker{Name: c.marker, Version: 0}},
		{1, nil},
		{2, &zkstore.Marker{Name: c.marker, Version: 1}},
		{1, nil},
		{1, nil},
		{2, &zkstore.Marker{Name: c.marker, Version: 2}},
	} {
		c.pace.limit = step.limit
		req := &pb.PutRequest{Key: []byte("k"), Value: []byte(fmt.Sprint(i))}
		p := &proposal{ctx: ctx, size: 16, done: make(chan struct{}), eval: func(bt *revision.Batch) error {
			_, err := translate.Put(bt, req)
			return err
		}}
		c.receive(p)
		if !c.launch() || len(c.flights) != 1 {
			t.Fatalf("step %d: nothing launched", i)
		}
		f := c.flights[0]
		<-f.done
		c.land()
		<-p.done
		if p.err != nil {
			t.Fatalf("step %d: %v", i, p.err)
		}
		if got := f.req.Marker; (got == nil) != (step.want == nil) || got != nil && *got != *step.want {
			t.Fatalf("step %d (depth %d): marker op %+v, want %+v", i, step.limit, got, step.want)
		}
	}
}

// TestAConnectionBlipUnderADeepPipelineLeavesNoOutcomeUnknown: with eight
// flights in flight, the connection drops under a run of commits before
// any reaches the log. Each is sent again once the flight it is chained
// on has its outcome (zkstore.CommitRequest.Predecessor), so every write
// lands and none is answered "request timed out, possibly due to
// connection lost" for a re-send that reached the log before its
// predecessor's.
func TestAConnectionBlipUnderADeepPipelineLeavesNoOutcomeUnknown(t *testing.T) {
	st := memlog.New(memlog.Options{})
	var calls, blipped, blippedChained atomic.Int32
	var from atomic.Int32 // the blip starts at the first chained commit after the tenth
	st.SetCommitFault(func(req zkstore.CommitRequest) memlog.Fault {
		n := calls.Add(1)
		if n > 10 && req.Pipelined {
			from.CompareAndSwap(0, n)
		}
		if f := from.Load(); f > 0 && n >= f && n < f+24 {
			blipped.Add(1)
			if req.Pipelined {
				blippedChained.Add(1)
			}
			return memlog.Blip
		}
		// A commit takes a while, as on ZooKeeper: the writers queue
		// behind it and the committer chains flights (in memory at full
		// speed, a run could commit every write alone).
		time.Sleep(time.Millisecond)
		return memlog.NoFault
	})
	l := newChainLog(st.Client())
	b := newEngineOn(t, l, func(c *Config) { c.CommitPipeline = 8; c.CommitLinger = -1 })
	const writers, each = 16, 20
	var wg sync.WaitGroup
	var failed atomic.Int32
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := b.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("w%d", w)), Value: []byte(fmt.Sprint(i))})
				cancel()
				if err != nil {
					failed.Add(1)
					t.Errorf("writer %d, put %d: %v", w, i, err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d commits, %d dropped with the connection (%d chained)", calls.Load(), blipped.Load(), blippedChained.Load())
	if blippedChained.Load() == 0 {
		t.Fatal("no chained flight was caught by the blip: the test does not test")
	}
	if lsns := l.broken(); len(lsns) > 0 {
		t.Errorf("entries %v landed chained on a commit that did not land", lsns)
	}
	checkLogReplaysToView(t, st, b)
}
