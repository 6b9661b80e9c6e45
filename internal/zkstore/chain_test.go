package zkstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// holdProxy forwards TCP connections on 127.0.0.1 to one server. While
// held it forwards nothing from its clients (what they send waits in the
// proxy); Reset closes every connection, dropping what it held.
type holdProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	gate   chan struct{} // closed: forwarding
	conns  []net.Conn
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target, gate: make(chan struct{})}
	close(p.gate)
	t.Cleanup(func() {
		_ = ln.Close()
		p.Reset()
	})
	go p.accept()
	return p
}

func (p *holdProxy) Addr() string { return p.ln.Addr().String() }

func (p *holdProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.pipe(c, s, true)
		go p.pipe(s, c, false)
	}
}

// pipe copies from src to dst; from a client (up), each chunk waits for
// the gate.
func (p *holdProxy) pipe(src, dst net.Conn, up bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if up {
				p.mu.Lock()
				gate := p.gate
				p.mu.Unlock()
				<-gate
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = src.Close()
			}
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
}

// Hold stops forwarding what clients send.
func (p *holdProxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate = make(chan struct{})
}

// Reset closes every connection (what was held is dropped) and forwards
// again.
func (p *holdProxy) Reset() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	gate := p.gate
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	select {
	case <-gate:
	default:
		close(gate)
	}
}

// TestRetriesAfterALostConnectionKeepThePipelinesOrder: eight chained
// commits are handed to a connection that drops before any reaches
// ZooKeeper. Each is sent again only once the commit it is chained on has
// its outcome: all eight land, in order — none is left of unknown outcome
// for having reached ZooKeeper before its predecessor. When another writer
// took the first one's position meanwhile, the first is a conflict and the
// seven behind it are refused without being sent again (nothing written).
func TestRetriesAfterALostConnectionKeepThePipelinesOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		foreign bool // another writer takes the first commit's position while the connection holds it
	}{
		{"AllLand", false},
		{"TheFirstLosesItsPosition", true},
	} {
		t.Run(tc.name, func(t *testing.T) { retriesKeepOrder(t, tc.foreign) })
	}
}

func retriesKeepOrder(t *testing.T, foreign bool) {
	addr := sharedZK.Addr(t)
	proxy := startHoldProxy(t, addr)
	lg := testutil.Logger(logrus.ErrorLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := sharedZK.FreshRoot()
	open := func(server string) *zkstore.Store {
		st, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{server}, Root: root,
			SessionTimeout: 8 * time.Second, Logger: lg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		return st
	}
	st := open(proxy.Addr())
	const depth = 8
	nonce := uint64(0xc4a1)
	marker := fmt.Sprintf("%016x-m", nonce)
	entry := func(lsn int64, nonce uint64) *revision.Entry {
		return &revision.Entry{LSN: lsn, Writer: revision.WriterTag{Nonce: nonce, Seq: uint64(lsn)},
			Ops: []revision.Op{{Kind: revision.OpTxn, Rev: lsn, Changes: []revision.Change{{Key: []byte("k"), Value: []byte(fmt.Sprint(lsn))}}}}}
	}
	res, err := st.Commit(ctx, zkstore.CommitRequest{Prev: 1, Entry: entry(2, nonce), Rev: 2, Marker: &zkstore.Marker{Name: marker, Create: true}})
	if err != nil || res.Outcome != zkstore.Committed {
		t.Fatalf("creating the marker: %+v %v", res, err)
	}

	proxy.Hold()
	type result struct {
		res zkstore.CommitResult
		err error
	}
	results := make([]result, depth)
	done := make([]chan struct{}, depth)
	sending := make([]chan struct{}, depth)
	for i := range depth {
		done[i], sending[i] = make(chan struct{}), make(chan struct{})
	}
	for i := range depth {
		prev := int64(2 + i)
		req := zkstore.CommitRequest{Prev: prev, Entry: entry(prev+1, nonce), Rev: prev + 1,
			Marker: &zkstore.Marker{Name: marker, Version: int32(i)}, Sending: sending[i]}
		if i > 0 {
			req.Pipelined, req.After = true, sending[i-1]
			req.Predecessor = &zkstore.Predecessor{Done: done[i-1], Landed: func() (bool, bool) {
				return zkstore.Landed(results[i-1].res, results[i-1].err)
			}}
		}
		go func() {
			defer close(done[i])
			results[i].res, results[i].err = st.Commit(ctx, req)
		}()
	}
	<-sending[depth-1]
	time.Sleep(100 * time.Millisecond) // every multi written to the connection, held by the proxy
	if foreign {
		other := open(addr)
		if res, err := other.Commit(ctx, zkstore.CommitRequest{Prev: 2, Entry: entry(3, 0xf0), Rev: 3}); err != nil || res.Outcome != zkstore.Committed {
			t.Fatalf("the other writer's commit: %+v %v", res, err)
		}
	}
	proxy.Reset()
	for i := range depth {
		<-done[i]
		r, want := results[i], zkstore.Committed
		switch {
		case foreign && i == 0:
			want = zkstore.Conflict
		case foreign:
			want = zkstore.Refused
		}
		if r.err != nil || r.res.Outcome != want || want == zkstore.Refused && !r.res.PrevMissing {
			t.Errorf("commit %d of %d (entry %d): %v %+v, want %v", i+1, depth, 3+i, r.err, r.res, want)
		}
	}
	wantHead := int64(2 + depth)
	if foreign {
		wantHead = 3
	}
	if h, err := st.Head(); err != nil || h.LSN != wantHead {
		t.Fatalf("head %+v %v, want entry %d", h, err, wantHead)
	}
}
