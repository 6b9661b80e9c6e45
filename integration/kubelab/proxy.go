package kubelab

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a re-pointable TCP (L4) proxy on 127.0.0.1, the stand-in for
// the DNS name or virtual IP a store is reached at: a client (kube-
// apiserver's --etcd-servers) connects to Addr, and each connection is
// forwarded byte for byte to the current target, so TLS passes through
// and the target's certificate must be valid for 127.0.0.1.
//
// [Proxy.Hold] starts a cut-over: it closes every forwarded connection
// (the client's requests in flight on them fail; etcd's client
// reconnects) and holds new connections unforwarded;
// [Proxy.Switch] points the proxy at a new target and forwards the held
// connections and every later one there. Its methods are safe for
// concurrent use.
type Proxy struct {
	// Addr is the address clients connect to.
	Addr string
	ln   net.Listener

	mu      sync.Mutex
	target  string
	held    chan struct{} // non-nil while held: closed by Switch
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
	dialErr []string
}

// StartProxy listens on a free port of 127.0.0.1 and forwards to target
// ("host:port") until the lab closes.
func (l *Lab) StartProxy(target string) (*Proxy, error) {
	port, err := l.ports.Pick()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	l.Defer(p.Close)
	return p, nil
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// forward waits while the proxy is held, then dials the target and
// copies both ways until either side ends.
func (p *Proxy) forward(c net.Conn) {
	defer p.untrack(c)
	var target string
	for {
		p.mu.Lock()
		held, closed := p.held, p.closed
		target = p.target
		p.mu.Unlock()
		if closed {
			return
		}
		if held == nil {
			break
		}
		<-held
	}
	s, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		p.mu.Lock()
		p.dialErr = append(p.dialErr, err.Error())
		p.mu.Unlock()
		return
	}
	if !p.track(s) {
		s.Close()
		return
	}
	defer p.untrack(s)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// One side ended: end both (a half-closed TLS connection is of no use).
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(s, c)
	go pipe(c, s)
	<-done
	<-done
}

// Hold closes every connection the proxy forwards and holds new ones
// until Switch. It returns how many sockets it closed (a forwarded
// connection is two: the client's and the target's).
func (p *Proxy) Hold() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
	n := 0
	for c := range p.conns {
		c.Close()
		n++
	}
	return n
}

// Switch points the proxy at target and forwards the held connections
// there.
func (p *Proxy) Switch(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

// DialErrors returns the errors of dials to the target so far.
func (p *Proxy) DialErrors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.dialErr...)
}

// Close stops listening, closes every connection and waits for the
// forwarding goroutines (idempotent).
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
	p.mu.Unlock()
	p.wg.Wait()
}
