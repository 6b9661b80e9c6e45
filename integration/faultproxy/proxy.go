// Package faultproxy is a TCP proxy on 127.0.0.1 that injects network
// faults between a client and one server: it can cut every connection
// (the peer sees a reset or EOF at once), blackhole them (connections stay
// open, or are accepted, but no byte goes through in either direction, as
// in a partition where packets are dropped), or delay every chunk of data.
//
// Tests put one proxy in front of each server a process must not reach
// during a partition (for example every ZooKeeper member, for one zketcd
// instance) and call [Proxy.Cut] or [Proxy.Blackhole], then [Proxy.Heal].
// It also stands in for the DNS name or virtual IP a store is reached at
// during a cut-over: [Proxy.Hold], then [Proxy.Switch] to the new store.
package faultproxy

import (
	"net"
	"sync"
	"time"
)

// Mode is what the proxy does with traffic.
type Mode int

const (
	// Pass forwards every byte (after the configured delay, if any).
	Pass Mode = iota
	// Cut closes every connection and refuses new ones (they are accepted
	// and closed at once).
	Cut
	// Blackhole keeps connections open and accepts new ones, but forwards
	// nothing; data sent meanwhile is dropped. Connections that were
	// blackholed are closed when the proxy heals, as a TCP connection
	// whose packets were dropped for long would be reset.
	Blackhole
	// Hold closes every connection and holds new ones unforwarded (their
	// bytes wait in the socket, nothing is dropped) until Switch or
	// Heal, which forwards them to the target of that moment.
	Hold
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Cut:
		return "cut"
	case Blackhole:
		return "blackhole"
	case Hold:
		return "hold"
	}
	return "unknown"
}

// Proxy forwards connections accepted on its address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	mode   Mode
	delay  time.Duration
	conns  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
	stats  Stats
	// released is closed when the proxy leaves Hold (nil otherwise).
	released chan struct{}
	dialErr  []string
}

// Stats counts what the proxy did.
type Stats struct {
	Accepted, Refused, Forwarded int64 // connections
	Bytes, Dropped               int64 // bytes forwarded and dropped
}

// link is one proxied connection: client side and server side.
type link struct {
	client, server net.Conn
	once           sync.Once
	blackholed     bool // saw blackhole mode; closed at heal
	// held, if not nil, is closed when the proxy stops holding: the link
	// was accepted during Hold and dials its target only then.
	held chan struct{}
}

func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		if l.server != nil {
			_ = l.server.Close()
		}
	})
}

// Start listens on a free 127.0.0.1 port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// Hold closes every open connection and holds new ones until Switch (or
// Heal). It returns how many sockets it closed (a forwarded connection is
// two: the client's and the target's).
func (p *Proxy) Hold() int {
	p.mu.Lock()
	n := 0
	for l := range p.conns {
		n++
		if l.server != nil {
			n++
		}
	}
	p.mu.Unlock()
	p.setMode(Hold)
	return n
}

// Switch points the proxy at target and forwards again: the connections
// held meanwhile and every later one go there.
func (p *Proxy) Switch(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.setMode(Pass)
}

// DialErrors returns the errors of the proxy's dials to its target so far.
func (p *Proxy) DialErrors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.dialErr...)
}

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Open returns how many connections are open: accepted and not yet
// closed, whether forwarding or blackholed.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Cut closes every open connection and refuses new ones until Heal.
func (p *Proxy) Cut() { p.setMode(Cut) }

// Blackhole stops all forwarding until Heal: open connections stay open
// but carry nothing, new connections are accepted and carry nothing.
func (p *Proxy) Blackhole() { p.setMode(Blackhole) }

// Heal forwards again. Connections that were blackholed are closed (their
// dropped bytes cannot be delivered); the peers reconnect.
func (p *Proxy) Heal() { p.setMode(Pass) }

// SetDelay delays every chunk of data forwarded in either direction by d
// (0: no delay). It applies in Pass mode, to open and new connections.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

func (p *Proxy) setMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m == Hold && p.released == nil {
		p.released = make(chan struct{})
	}
	if m != Hold && p.released != nil {
		close(p.released)
		p.released = nil
	}
	p.mode = m
	for l := range p.conns {
		switch m {
		case Cut, Hold:
			l.close()
			delete(p.conns, l)
		case Blackhole:
			l.blackholed = true
		case Pass:
			if l.blackholed {
				l.close()
				delete(p.conns, l)
			}
		}
	}
}

// Close stops listening and closes every connection. It waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for l := range p.conns {
		l.close()
	}
	p.conns = map[*link]struct{}{}
	if p.released != nil {
		close(p.released)
		p.released = nil
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode, closed := p.mode, p.closed
		p.stats.Accepted++
		if mode == Cut || closed {
			p.stats.Refused++
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		l := &link{client: c, blackholed: mode == Blackhole, held: p.released}
		p.conns[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.handle(l)
	}
}

func (p *Proxy) handle(l *link) {
	defer p.wg.Done()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
	}()
	if l.blackholed {
		// Accepted during a blackhole: hold it, reading and dropping
		// whatever the client sends, until heal or close.
		p.drain(l.client)
		return
	}
	if l.held != nil {
		<-l.held
	}
	p.mu.Lock()
	target, gone := p.target, p.closed
	p.mu.Unlock()
	if gone {
		return
	}
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		p.mu.Lock()
		p.dialErr = append(p.dialErr, err.Error())
		p.mu.Unlock()
		return
	}
	p.mu.Lock()
	l.server = server
	gone = p.closed
	if _, ok := p.conns[l]; !ok {
		gone = true // cut meanwhile
	}
	if !gone {
		p.stats.Forwarded++
	}
	p.mu.Unlock()
	if gone {
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(l, server, l.client); done <- struct{}{} }()
	go func() { p.pipe(l, l.client, server); done <- struct{}{} }()
	<-done
	l.close()
	<-done
}

// drain reads and drops from c until it fails.
func (p *Proxy) drain(c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		p.mu.Lock()
		p.stats.Dropped += int64(n)
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// pipe copies src to dst, dropping data while the link is blackholed and
// delaying it while a delay is set.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hole, delay := l.blackholed, p.delay
			if hole {
				p.stats.Dropped += int64(n)
			}
			p.mu.Unlock()
			if !hole {
				if delay > 0 {
					time.Sleep(delay)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
				p.mu.Lock()
				p.stats.Bytes += int64(n)
				p.mu.Unlock()
			}
		}
		if err != nil {
			return // EOF or a broken connection: the caller closes both sides
		}
	}
}
