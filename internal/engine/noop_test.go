package engine

// The no-op rule of the commit pipeline: a request that writes nothing,
// evaluated on the staged state of a flight in flight, is answered only by
// a flight sent after it arrived (or a barrier), on memlog.

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// holdLog is one instance's slow link to the log: while holding, the
// answer of a commit that writes key hold is delayed (the entry is in the
// log and other instances read it), and so are the instance's reads of
// the log's entries.
type holdLog struct {
	*memlog.Client
	hold    []byte
	mu      sync.Mutex
	holding bool
	held    chan struct{} // receives when a commit of hold is held
	release chan struct{} // closed to let everything through
}

func (l *holdLog) blocked() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holding
}

func (l *holdLog) Commit(ctx context.Context, req zkstore.CommitRequest) (zkstore.CommitResult, error) {
	res, err := l.Client.Commit(ctx, req)
	if l.blocked() && writesKey(req.Entry, l.hold) {
		l.held <- struct{}{}
		<-l.release
	}
	return res, err
}

func (l *holdLog) ReadEntries(ctx context.Context, from, to int64, window int, fn func(e *revision.Entry, size int) error) error {
	if l.blocked() {
		select {
		case <-l.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return l.Client.ReadEntries(ctx, from, to, window, fn)
}

func writesKey(e *revision.Entry, key []byte) bool {
	for _, op := range e.Ops {
		for _, ch := range op.Changes {
			if bytes.Equal(ch.Key, key) {
				return true
			}
		}
	}
	return false
}

// TestPipelinedNoOpIsNotAnsweredByAFlightSentBeforeIt: instance A has a
// flight in flight (its entry is in the log, its answer on the way) when
// instance B commits k=new after it and acknowledges it; then a Txn
// "if k == new then put k2" reaches A and, evaluated on the flight's
// staged state (k=old), writes nothing. The landing of that flight proves
// nothing about the time after the Txn arrived: answering it then would say
// k != new after k=new was acknowledged. It must see k=new.
func TestPipelinedNoOpIsNotAnsweredByAFlightSentBeforeIt(t *testing.T) {
	st := memlog.New(memlog.Options{})
	lg := testutil.Logger(logrus.ErrorLevel)
	log := &holdLog{Client: st.Client(), hold: []byte("hold"), held: make(chan struct{}, 1), release: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := New(ctx, Config{Name: "a", Logger: lg, Registerer: prometheus.NewRegistry(), CommitPipeline: 4, CommitLinger: -1}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	b, _ := engine(t, st, "b", nil)

	put(t, a, "k", "old")
	log.mu.Lock()
	log.holding = true
	log.mu.Unlock()
	held := make(chan error, 1)
	go func() {
		_, err := a.Put(ctx, &pb.PutRequest{Key: []byte("hold"), Value: []byte("x")})
		held <- err
	}()
	select {
	case <-log.held:
	case <-ctx.Done():
		t.Fatal("the flight of hold never reached the log")
	}
	put(t, b, "k", "new") // after hold's entry, acknowledged

	txn := make(chan *pb.TxnResponse, 1)
	go func() {
		resp, err := a.Txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte("k"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL,
				TargetUnion: &pb.Compare_Value{Value: []byte("new")}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k2"), Value: []byte("y")}}}},
		})
		if err != nil {
			t.Error(err)
		}
		txn <- resp
	}()
	time.Sleep(200 * time.Millisecond) // the Txn is evaluated on hold's flight meanwhile
	log.mu.Lock()
	log.holding = false
	log.mu.Unlock()
	close(log.release)
	if err := <-held; err != nil {
		t.Fatalf("put hold: %v", err)
	}
	resp := <-txn
	if resp == nil {
		return
	}
	if !resp.Succeeded {
		t.Fatal("the Txn answered k != new after k=new was acknowledged: a no-op answered by a flight sent before it arrived")
	}
	if kv := get(t, b, "k2", false).Kvs; len(kv) != 1 {
		t.Fatalf("k2 = %v after a Txn that succeeded", kv)
	}
}
