package zkstore

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// connectResponse encodes a ZooKeeper connect response frame as a server
// sends it: length, protocolVersion, timeOut, sessionId, passwd, readOnly.
func connectResponse(timeoutMs int32, session int64) []byte {
	body := binary.BigEndian.AppendUint32(nil, 0)
	body = binary.BigEndian.AppendUint32(body, uint32(timeoutMs))
	body = binary.BigEndian.AppendUint64(body, uint64(session))
	body = binary.BigEndian.AppendUint32(body, 16)
	body = append(body, make([]byte, 16)...)
	body = append(body, 0)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// TestHandshakeConnReportsTheGrantedTimeout: the dialer's connection tells
// the session and the timeout of the connect response, read the way
// go-zookeeper reads it (the length, then the body, in pieces), before the
// reader has the end of it; a response for an expired session (ID 0) is
// reported as such.
func TestHandshakeConnReportsTheGrantedTimeout(t *testing.T) {
	for _, tc := range []struct {
		name      string
		timeoutMs int32
		session   int64
	}{
		{"granted", 4000, 0x1234_5678_9abc},
		{"expired", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer server.Close()
			type grant struct {
				session int64
				timeout time.Duration
			}
			got := make(chan grant, 1)
			c := newHandshakeConn(client, time.Now().Add(time.Second))
			c.connected = func(s int64, d time.Duration) { got <- grant{s, d} }
			defer c.Close()
			frame := connectResponse(tc.timeoutMs, tc.session)
			go func() {
				for _, piece := range [][]byte{frame[:3], frame[3:9], frame[9:21], frame[21:]} {
					if _, err := server.Write(piece); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, len(frame))
			if _, err := io.ReadFull(c, buf[:4]); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf[4:len(frame)-1]); err != nil {
				t.Fatal(err)
			}
			select {
			case g := <-got:
				t.Fatalf("reported %+v before the whole response was read", g)
			default:
			}
			if _, err := io.ReadFull(c, buf[len(frame)-1:]); err != nil {
				t.Fatal(err)
			}
			select {
			case g := <-got:
				if g.session != tc.session || g.timeout != time.Duration(tc.timeoutMs)*time.Millisecond {
					t.Fatalf("reported session %x, timeout %v; want %x, %dms", g.session, g.timeout, tc.session, tc.timeoutMs)
				}
			default:
				t.Fatal("the connect response was not reported")
			}
		})
	}
}

// TestGrantsFollowTheSessionsConnections: the least timeout granted to a
// session's connections is kept until a new session starts afresh; an
// expired session's response changes nothing.
func TestGrantsFollowTheSessionsConnections(t *testing.T) {
	var gs grants
	gs.connected(1, 4*time.Second)
	gs.connected(1, 2*time.Second)
	gs.connected(1, 6*time.Second)
	if g := gs.get(); g.Session != 1 || g.Timeout != 6*time.Second || g.MinTimeout != 2*time.Second {
		t.Fatalf("after three connections: %+v", g)
	}
	gs.connected(0, 0)
	if g := gs.get(); g.Session != 1 || g.Timeout != 6*time.Second {
		t.Fatalf("an expired session's response changed the grant: %+v", g)
	}
	gs.connected(2, 8*time.Second)
	if g := gs.get(); g.Session != 2 || g.Timeout != 8*time.Second || g.MinTimeout != 8*time.Second {
		t.Fatalf("a new session: %+v", g)
	}
}

// TestParseConfReadsTheTickAndTheBounds parses a conf answer of ZooKeeper
// 3.8 and its refusals.
func TestParseConfReadsTheTickAndTheBounds(t *testing.T) {
	const answer = "clientPort=2181\nsecureClientPort=-1\ndataDir=/var/lib/zookeeper/version-2\ndataDirSize=67108880\n" +
		"dataLogDir=/var/lib/zookeeper/version-2\ndataLogSize=67108880\ntickTime=2000\nmaxClientCnxns=60\n" +
		"minSessionTimeout=4000\nmaxSessionTimeout=40000\nclientPortListenBacklog=-1\nserverId=1\n"
	a, err := parseConf(answer)
	if err != nil {
		t.Fatal(err)
	}
	if a.tick != 2*time.Second || a.minTimeout != 4*time.Second || a.maxTimeout != 40*time.Second {
		t.Fatalf("parsed %+v", a)
	}
	if _, err := parseConf("conf is not executed because it is not in the whitelist.\n"); !errors.Is(err, errConfNotAllowed) {
		t.Fatalf("whitelist refusal: %v", err)
	}
	for _, out := range []string{"This ZooKeeper instance is not currently serving requests\n", ""} {
		if _, err := parseConf(out); err == nil {
			t.Fatalf("%q parsed", out)
		}
	}
}

// TestGrantReportsWhatZooKeeperGranted opens stores on real servers whose
// maxSessionTimeout is below the requested timeout: Grant reports the
// granted timeout, and the tick and the bounds from conf where conf is
// allowed; where it is not, the tick is unknown (the refusal named) unless
// declared.
func TestGrantReportsWhatZooKeeperGranted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper (Java)")
	}
	open := func(t *testing.T, addr string, declared time.Duration) *Store {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := Open(ctx, Config{Servers: []string{addr}, Root: "/grant", SessionTimeout: 10 * time.Second,
			TickTime: declared, Logger: logrus.NewEntry(logrus.New())})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		return st
	}
	opts := zkservertest.Options(t)
	opts.TickTime, opts.MaxSessionTimeout = 500*time.Millisecond, 2*time.Second
	allowed := zkservertest.StandaloneWith(t, opts)
	g := open(t, allowed.Addr(), 0).Grant()
	if g.Session == 0 || g.Requested != 10*time.Second || g.Timeout != 2*time.Second || g.MinTimeout != 2*time.Second || g.Since.IsZero() {
		t.Fatalf("grant %+v: want 2s granted of 10s requested", g)
	}
	if g.Tick != 500*time.Millisecond || g.TickFrom != "conf" || g.MinSessionTimeout != time.Second || g.MaxSessionTimeout != 2*time.Second {
		t.Fatalf("grant %+v: want tick 500ms from conf, bounds 1s..2s", g)
	}
	if g := open(t, allowed.Addr(), time.Second).Grant(); g.Tick != time.Second || g.TickFrom != "declared" {
		t.Fatalf("a declared tick above conf's: %+v", g)
	}

	opts = zkservertest.Options(t)
	opts.TickTime, opts.MaxSessionTimeout = 500*time.Millisecond, 2*time.Second
	opts.ExtraConfig = map[string]string{"4lw.commands.whitelist": "srvr"}
	refused := zkservertest.StandaloneWith(t, opts)
	g = open(t, refused.Addr(), 0).Grant()
	if g.Timeout != 2*time.Second || g.Tick != 0 || !errors.Is(g.TickErr, errConfNotAllowed) {
		t.Fatalf("conf refused: grant %+v, want 2s granted, no tick, the refusal", g)
	}
	if g := open(t, refused.Addr(), 750*time.Millisecond).Grant(); g.Tick != 750*time.Millisecond || g.TickFrom != "declared" || g.TickErr != nil {
		t.Fatalf("conf refused, tick declared: %+v", g)
	}
}

// TestTickIsAskedAgainAfterAReconnect: a rolling restart of the ensemble
// can change its tickTime under a session that survives it; the tick is
// asked for again at every restored connection, not only for a new
// session, so the proof window follows the servers the session moved to.
func TestTickIsAskedAgainAfterAReconnect(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper (Java)")
	}
	srv := zkservertest.Standalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := Open(ctx, Config{Servers: []string{srv.Addr()}, Root: "/tick-again", SessionTimeout: 20 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	sid, _ := st.Session()
	asked := st.grants.askedAt()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		if now, ok := st.Session(); ok && now == sid && st.grants.askedAt().After(asked) && !st.grants.learning.Load() {
			break
		}
		select {
		case <-st.SessionChanged():
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			now, ok := st.Session()
			t.Fatalf("after the reconnect (session %x, connected %v, was %x) the tick was not asked for again", now, ok, sid)
		}
	}
	if g := st.Grant(); g.Tick != 2*time.Second || g.TickFrom != "conf" {
		t.Fatalf("grant after the reconnect: %+v", g)
	}
}

// TestTickIsRelearnedWhileTheSessionStaysOnItsServer: a rolling restart of
// the ensemble raises tickTime on a member the session is not connected
// to; the session never reconnects (its own server is not restarted yet),
// and the tick is still learnt again within the relearn interval: the
// conf of every server is asked periodically, and the largest tick wins.
func TestTickIsRelearnedWhileTheSessionStaysOnItsServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper (Java)")
	}
	opts := zkservertest.Options(t)
	opts.TickTime = 500 * time.Millisecond
	ens := zkservertest.EnsembleWith(t, 3, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := Open(ctx, Config{Servers: ens.Addrs(), Root: "/tick-relearn", SessionTimeout: 10 * time.Second,
		Logger: quietLogger(), tickRelearn: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if g := st.Grant(); g.Tick != opts.TickTime {
		t.Fatalf("tick %v at the start, the ensemble ticks every %v", g.Tick, opts.TickTime)
	}
	// Restart a member that is neither the session's server nor the
	// ZooKeeper leader (so that the session's server keeps its quorum)
	// with a tick twice as long.
	leader, err := ens.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := -1
	for i, m := range ens.Members() {
		if i != leader && m.Addr() != st.conn.Server() {
			victim = i
			break
		}
	}
	sid, _ := st.Session()
	since := st.Grant().Since
	m := ens.Member(victim)
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	m.SetTickTime(2 * opts.TickTime)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "the raised tick learnt", func() bool { return st.Grant().Tick == 2*opts.TickTime })
	if now, ok := st.Session(); !ok || now != sid || !st.Grant().Since.Equal(since) {
		t.Fatalf("the session reconnected meanwhile (session %x, was %x, connected %v): the test does not test", now, sid, ok)
	}
}
