package zkstore

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
)

// Grant is what ZooKeeper granted the current session, and how fast its
// servers tick: what an engine needs to bound how long the session can
// outlive a transaction of it (see the engine's proof window).
//
// ZooKeeper clamps the timeout a client asks for to the server's
// [minSessionTimeout, maxSessionTimeout] (by default 2 and 20 ticks) and
// answers the result in the connect response; every server the client
// connects to clamps again, with its own bounds. The servers' tickTime is
// not in any response: the conf four-letter word tells it where
// 4lw.commands.whitelist allows conf, else the operator declares it
// (Config.TickTime).
type Grant struct {
	// Session is the session these values are about (0: none yet).
	Session int64
	// Requested is the session timeout asked for (Config.SessionTimeout).
	Requested time.Duration
	// Timeout is what the current connection's server granted; MinTimeout
	// the least any connection of the session was granted.
	Timeout, MinTimeout time.Duration
	// Since is when the current connection's connect response arrived:
	// every request sent after it went through that connection.
	Since time.Time
	// Tick is ZooKeeper's tickTime (0: unknown), TickFrom where it comes
	// from: "conf" (the largest the servers answered), "declared"
	// (Config.TickTime) or "" (unknown; TickErr says why).
	Tick     time.Duration
	TickFrom string
	TickErr  error
	// MinSessionTimeout and MaxSessionTimeout are the bounds conf
	// answered (the narrowest over the servers; 0: unknown).
	MinSessionTimeout, MaxSessionTimeout time.Duration
}

// errConfNotAllowed is a server's refusal of the conf four-letter word.
var errConfNotAllowed = errors.New("conf is not in the server's 4lw.commands.whitelist")

// confAnswer is what one server's conf told.
type confAnswer struct {
	tick, minTimeout, maxTimeout time.Duration
}

// grants keeps the Grant up to date. Safe for concurrent use.
type grants struct {
	mu    sync.Mutex
	g     Grant
	asked time.Time // the last learnTick's start
	// learning is set while a learnTick runs in the background.
	learning atomic.Bool
}

// askedAt is when the tick was last asked for.
func (gs *grants) askedAt() time.Time {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return gs.asked
}

// connected records a connect response (called by the dialer's connection
// before go-zookeeper acts on it).
func (gs *grants) connected(session int64, timeout time.Duration) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if session == 0 {
		return // expired: no session, no grant
	}
	if session != gs.g.Session {
		gs.g.Session, gs.g.MinTimeout = session, timeout
	}
	gs.g.Timeout, gs.g.MinTimeout, gs.g.Since = timeout, min(gs.g.MinTimeout, timeout), time.Now()
}

// get returns the current grant.
func (gs *grants) get() Grant {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return gs.g
}

// setTick records the tick and the servers' bounds.
func (gs *grants) setTick(tick time.Duration, from string, err error, minT, maxT time.Duration) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.g.Tick, gs.g.TickFrom, gs.g.TickErr = tick, from, err
	gs.g.MinSessionTimeout, gs.g.MaxSessionTimeout = minT, maxT
}

// Grant returns what ZooKeeper granted the current session (see Grant).
func (s *Store) Grant() Grant {
	g := s.grants.get()
	g.Requested = s.cfg.SessionTimeout
	return g
}

// confTimeout bounds one conf exchange: a paused server accepts the TCP
// connection and never answers. tickRelearn is how often the servers are
// asked again, whether or not one has told the tick: a rolling restart of
// the ensemble may change the tickTime of members the session never leaves
// (its own server restarted last, or not at all), which no reconnect would
// make it ask again, and a tick learnt too small overstates the leader
// proof window (proofwindow.go in the engine). Config.tickRelearn
// shortens it for tests.
const (
	confTimeout = 2 * time.Second
	tickRelearn = 30 * time.Second
)

// tickEvery is how often the servers are asked for the tick.
func (s *Store) tickEvery() time.Duration {
	if s.cfg.tickRelearn > 0 {
		return s.cfg.tickRelearn
	}
	return tickRelearn
}

// relearnTick runs learnTick in the background (one at a time), ended by
// Close.
func (s *Store) relearnTick() {
	if !s.grants.learning.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.grants.learning.Store(false)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.closed:
				cancel()
			case <-ctx.Done():
			}
		}()
		s.learnTick(ctx)
	}()
}

// learnTick asks every server for conf and records the tick: the largest
// answered (the servers of one ensemble should share it; the largest is the
// safe side), else the declared one, else none with the reason. The
// declared tick counts even beside answers: the larger wins.
func (s *Store) learnTick(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, confTimeout)
	defer cancel()
	s.grants.mu.Lock()
	s.grants.asked = time.Now()
	s.grants.mu.Unlock()
	servers := zk.FormatServers(s.cfg.Servers)
	answers := make([]confAnswer, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, addr := range servers {
		wg.Go(func() { answers[i], errs[i] = askConf(ctx, addr, s.cfg.TLS) })
	}
	wg.Wait()
	var tick, minT, maxT time.Duration
	var firstErr error
	for i, a := range answers {
		if errs[i] != nil {
			firstErr = cmpErr(firstErr, errs[i])
			continue
		}
		tick = max(tick, a.tick)
		if minT == 0 || a.minTimeout > minT {
			minT = a.minTimeout
		}
		if maxT == 0 || a.maxTimeout < maxT {
			maxT = a.maxTimeout
		}
	}
	from := ""
	switch {
	case tick > 0 && s.cfg.TickTime > tick:
		tick, from = s.cfg.TickTime, "declared"
	case tick > 0:
		from = "conf"
	case s.cfg.TickTime > 0:
		tick, from = s.cfg.TickTime, "declared"
	}
	if tick > 0 {
		firstErr = nil
	} else if firstErr == nil {
		firstErr = errors.New("no server answered conf")
	}
	s.grants.setTick(tick, from, firstErr, minT, maxT)
	lg := s.log.WithFields(logrus.Fields{"tick": tick, "from": from})
	if firstErr != nil {
		lg = lg.WithError(firstErr)
	}
	lg.Debug("zookeeper tickTime")
}

// cmpErr keeps the first error, preferring a refusal of conf (what the
// operator can change) to an unreachable server.
func cmpErr(have, err error) error {
	if have == nil || (errors.Is(err, errConfNotAllowed) && !errors.Is(have, errConfNotAllowed)) {
		return err
	}
	return have
}

// askConf sends the conf four-letter word to addr (over TLS when tlsCfg is
// set, as to the secure client port) and parses tickTime and the session
// timeout bounds from the answer.
func askConf(ctx context.Context, addr string, tlsCfg *tls.Config) (confAnswer, error) {
	d := &net.Dialer{}
	var (
		c   net.Conn
		err error
	)
	if tlsCfg != nil {
		c, err = (&tls.Dialer{NetDialer: d, Config: tlsCfg}).DialContext(ctx, "tcp", addr)
	} else {
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return confAnswer{}, fmt.Errorf("conf %s: %w", addr, err)
	}
	defer func() { _ = c.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, "conf"); err != nil {
		return confAnswer{}, fmt.Errorf("conf %s: %w", addr, err)
	}
	out, err := io.ReadAll(io.LimitReader(c, 64<<10))
	if err != nil && len(out) == 0 {
		return confAnswer{}, fmt.Errorf("conf %s: %w", addr, err)
	}
	a, err := parseConf(string(out))
	if err != nil {
		return confAnswer{}, fmt.Errorf("conf %s: %w", addr, err)
	}
	return a, nil
}

// parseConf reads tickTime, minSessionTimeout and maxSessionTimeout (in
// milliseconds) from a conf answer.
func parseConf(out string) (confAnswer, error) {
	if strings.Contains(out, "not in the whitelist") {
		return confAnswer{}, errConfNotAllowed
	}
	var a confAnswer
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		ms, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "tickTime":
			a.tick = time.Duration(ms) * time.Millisecond
		case "minSessionTimeout":
			a.minTimeout = time.Duration(ms) * time.Millisecond
		case "maxSessionTimeout":
			a.maxTimeout = time.Duration(ms) * time.Millisecond
		}
	}
	if a.tick <= 0 {
		if strings.Contains(out, "not currently serving") {
			return confAnswer{}, errors.New("the server does not serve requests")
		}
		return confAnswer{}, errors.New("no tickTime in the answer")
	}
	return a, nil
}
