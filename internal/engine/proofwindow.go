package engine

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// The leader proof window: how long after a ZooKeeper transaction of its
// session was sent, and landed, the leader instance may still take the
// session for alive without asking ZooKeeper again. The read lease
// (readlease.go) answers reads within it, and a keepalive at the leader
// (lease.go) is answered from memory within it: both need the session —
// which holds the leader's election znode and the read lease znode — to
// outlive the moment they answer, so that no other instance can lead or
// commit before then.
//
// What bounds it is how ZooKeeper 3.8 refreshes a session, read from its
// server code:
//
//   - The ZooKeeper leader alone expires sessions. It keeps each session's
//     expiry at the next tick boundary after the time of its last refresh
//     plus the timeout that refresh carried (ExpiryQueue.update, called by
//     SessionTrackerImpl.touchSession); a later refresh replaces the
//     expiry, even with an earlier one.
//   - A session attached to a ZooKeeper follower is refreshed at the leader
//     only through that follower: the follower notes every packet of the
//     session (requests, and go-zookeeper's ping, sent every third of the
//     timeout granted to the connection) with the timeout it granted, and
//     sends what it noted to the leader in its answer to the leader's ping
//     (Learner.ping), which the leader sends to each follower every half
//     tick. Requests the follower forwards refresh nothing at the leader
//     (ZooKeeperServer.touch skips requests without a client connection);
//     a follower cut off from the quorum keeps answering the client's
//     pings until it notices (syncLimit ticks), so they prove nothing.
//   - A connect (a new session, or the session moving to another server)
//     refreshes it at the leader as it is established (createSession, or
//     the revalidation a follower asks the leader for).
//   - Each server clamps the timeout the client asks for to its own
//     [minSessionTimeout, maxSessionTimeout] (ZooKeeperServer
//     .processConnectRequest; by default 2 and 20 ticks, but either may be
//     set to anything, so the tick cannot be inferred from a grant).
//
// Let a transaction X of the session be sent at s on its current
// connection (granted Gc; the least any connection of the session was
// granted is Gmin — as far as this client knows: a connection whose
// connect response never arrived was granted too, so Gmin also counts the
// least the servers that answered conf grant, the request clamped by their
// lowest maxSessionTimeout), and land. The follower F forwarded X to the leader
// after X reached it (at or after s), on the same TCP stream as its ping
// answers, so the leader had every answer F sent before X. F answers at
// least every half tick, so one of them left F within tick/2 before X did;
// it carried every packet of the session F had received, the newest of
// which came at most Gc/3 before it. The leader therefore refreshed the
// session at or after s − Gc/3 − tick/2, with a timeout of at least Gmin,
// and cannot expire it before
//
//	s + Gmin − Gc/3 − tick/2    (s + 2G/3 − tick/2 when every server grants G)
//
// by its clock. (X landing also shows the leader took the session for
// alive then; a session attached to the ZooKeeper leader itself is
// refreshed at every packet, which only helps; a connect after s refreshes
// it later still, but a proof sent before the current connection's
// connect response is not used, so a server that granted less is taken
// into account.) The window is half that bound: the other half is the
// margin for what the derivation leaves out — this host's monotonic clock
// running slower than the ZooKeeper leader's, and delays (scheduling,
// network, ZooKeeper's request queues) between a packet and the refresh
// that carries it. That is the assumption, beside etcd's
// ReadOnlyLeaseBased (bounded clock drift, an election timeout): the
// clocks run at rates within a factor of two of each other and such
// delays stay below the margin; a suspended VM or a stopped process
// breaks the clock assumption, as it breaks etcd's.
//
// The tick is ZooKeeper's tickTime, from the servers' conf four-letter
// word where 4lw.commands.whitelist allows it, else as declared
// (--zk-tick-time). Without it no window can be shown: reads take the
// barrier, keepalives wait for a barrier round that started after them
// (no clock needed), and the read lease is refused.

// proofWindow returns the window the grant g allows (see above), at most
// limit when limit is positive, or an error naming the values when it
// allows none (limit negative: the clock-free proof was asked for).
func proofWindow(g zkstore.Grant, limit time.Duration) (time.Duration, error) {
	switch {
	case limit < 0:
		return 0, fmt.Errorf("the leader proof window is off (clock-free proofs only)")
	case g.Session == 0 || g.Timeout <= 0:
		return 0, fmt.Errorf("no session timeout granted yet (requested %v)", g.Requested)
	case g.Tick <= 0:
		return 0, fmt.Errorf("zookeeper's tickTime is unknown (%v): granted session timeout %v (requested %v); allow conf in zookeeper's 4lw.commands.whitelist, or declare the tick with --zk-tick-time",
			g.TickErr, g.Timeout, g.Requested)
	}
	least := g.MinTimeout
	if g.MaxSessionTimeout > 0 && g.Requested > 0 {
		// A connection whose connect response never arrived (its handshake
		// timed out) was granted, and refreshed the session at the
		// ZooKeeper leader with, what its server grants: at least the
		// request clamped by the lowest maxSessionTimeout conf told.
		least = min(least, g.Requested, g.MaxSessionTimeout)
	}
	bound := least - g.Timeout/3 - g.Tick/2
	if bound <= 0 {
		return 0, fmt.Errorf("granted session timeout %v (requested %v; the least granted to this session %v, the least a server grants %v) at tickTime %v: the session can expire %v after a transaction of it, no time to answer from memory",
			g.Timeout, g.Requested, g.MinTimeout, least, g.Tick, bound)
	}
	w := bound / 2
	if limit > 0 && limit < w {
		w = limit
	}
	return w, nil
}

// windowState is the window in force for one grant, as last logged.
type windowState struct {
	grant  zkstore.Grant
	window time.Duration
	err    error
}

// liveProof is when a ZooKeeper transaction of session, since landed, was
// sent.
//
// lsn is a log position ZooKeeper's log had reached when it landed (the
// commit's entry, or the head a barrier round read after it): every
// commit that landed before the transaction was sent is at or below it.
type liveProof struct {
	session int64
	sent    time.Time
	lsn     int64
}

// liveness keeps the newest proof that this instance's session was alive
// and tells whether it still holds (the proof window, above): what the
// read lease (readlease.go) and the keepalives answered from memory
// (lessor.go) rest on. Safe for concurrent use.
type liveness struct {
	*core
	proof atomic.Pointer[liveProof]
}

// prove records that a transaction sent at sent landed on the current
// session, with the log at lsn or beyond. The session reported now is the
// one it landed on or one created after it was sent; either outlives sent
// by what its grant allows (fresh also asks that sent come after the
// current connection's start).
func (l *liveness) prove(sent time.Time, lsn int64) {
	sid, ok := l.store.Session()
	if !ok {
		return
	}
	p := &liveProof{session: sid, sent: sent, lsn: lsn}
	for {
		old := l.proof.Load()
		if old != nil && old.session == sid && !old.sent.Before(sent) {
			return
		}
		if old != nil && old.session == sid && old.lsn > p.lsn {
			p.lsn = old.lsn // ZooKeeper answers a session in order: never less
		}
		if l.proof.CompareAndSwap(old, p) {
			return
		}
	}
}

// window returns the proof window of session sid and the start of its
// current connection (a proof sent before it does not count), or 0 if sid
// is not the current session or its grant allows none.
func (l *liveness) window(sid int64) (time.Duration, time.Time) {
	g := l.store.Grant()
	if g.Session != sid {
		return 0, time.Time{}
	}
	w, err := proofWindow(g, l.cfg.LeaderProofWindow)
	if err != nil {
		return 0, time.Time{}
	}
	return w, g.Since
}

// fresh returns the newest proof that session sid was alive if it still
// holds at now (see the proof window), else nil.
func (l *liveness) fresh(sid int64, now time.Time) *liveProof {
	p := l.proof.Load()
	if p == nil || p.session != sid {
		return nil
	}
	w, since := l.window(sid)
	if w <= 0 || !p.sent.After(since) || !now.Before(p.sent.Add(w)) {
		return nil
	}
	return p
}

// run follows the proof window the session's grant allows: logs it, and
// sets its metrics, at every change, until the engine stops.
func (l *liveness) run() {
	lg := l.log.WithField("component", "proof-window")
	var ws *windowState
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		ch := l.store.SessionChanged()
		ws = l.follow(ws, lg)
		select {
		case <-l.ctx.Done():
			return
		case <-ch:
		case <-tick.C:
		}
	}
}

// follow logs the proof window and sets its metrics whenever the grant
// changes (a new session, or a connection granted another timeout, or a
// tick learnt), and returns the new state.
func (l *liveness) follow(last *windowState, lg *logrus.Entry) *windowState {
	g := l.store.Grant()
	if last != nil && last.grant.Session == g.Session && last.grant.Timeout == g.Timeout &&
		last.grant.MinTimeout == g.MinTimeout && last.grant.Tick == g.Tick {
		return last
	}
	w, err := proofWindow(g, l.cfg.LeaderProofWindow)
	st := &windowState{grant: g, window: w, err: err}
	l.metrics.proofWindow.Set(w.Seconds())
	l.metrics.grantedTimeout.Set(g.Timeout.Seconds())
	l.metrics.zkTick.Set(g.Tick.Seconds())
	f := logrus.Fields{"session": fmt.Sprintf("%x", g.Session), "requested_timeout": g.Requested,
		"granted_timeout": g.Timeout, "tick": g.Tick, "tick_from": g.TickFrom, "window": w}
	switch {
	case g.Session == 0:
	case err != nil:
		lg.WithFields(f).WithError(err).Warn("no leader proof window: reads and keepalives at the leader wait for a zookeeper round trip")
	case g.Timeout < g.Requested:
		lg.WithFields(f).Warn("zookeeper granted a shorter session timeout than requested: the leader proof window follows the grant")
	default:
		lg.WithFields(f).Info("leader proof window")
	}
	return st
}
