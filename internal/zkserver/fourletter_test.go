package zkserver

import (
	"errors"
	"strings"
	"testing"
)

func TestParseMode(t *testing.T) {
	t.Parallel()
	srvr := "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nReceived: 1\nSent: 0\nConnections: 1\nOutstanding: 0\nZxid: 0x0\nMode: follower\nNode count: 5\n"
	if mode, err := parseMode("a", srvr); err != nil || mode != ModeFollower {
		t.Fatalf("parseMode = %q, %v", mode, err)
	}
	if _, err := parseMode("a", "This ZooKeeper instance is not currently serving requests\n"); !errors.Is(err, ErrNotServing) {
		t.Fatalf("not serving: err = %v", err)
	}
	if _, err := parseMode("a", "srvr is not executed because it is not in the whitelist.\n"); err == nil || !strings.Contains(err.Error(), "whitelist") {
		t.Fatalf("whitelist: err = %v", err)
	}
}

func TestParseZxidReadsTheHexCounter(t *testing.T) {
	t.Parallel()
	srvr := "Zookeeper version: 3.8.0\nZxid: 0x10000002a\nMode: leader\n"
	if z, err := parseZxid("a", srvr); err != nil || z != 0x10000002a {
		t.Fatalf("parseZxid = %#x, %v", z, err)
	}
	if _, err := parseZxid("a", "This ZooKeeper instance is not currently serving requests\n"); !errors.Is(err, ErrNotServing) {
		t.Fatalf("not serving: err = %v", err)
	}
	if _, err := parseZxid("a", "Zxid: 0xzz\nMode: leader\n"); err == nil {
		t.Fatal("bad zxid accepted")
	}
}

func TestNettyAvailableNeedsItsJarsOnTheClassPath(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cp   []string
		want bool
	}{
		{[]string{"/usr/share/java/zookeeper.jar", "/usr/share/java/netty-codec.jar"}, true},
		{[]string{"/opt/zookeeper/lib/*"}, true},
		{[]string{"/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar"}, false},
	} {
		if got := NettyAvailable(c.cp); got != c.want {
			t.Errorf("NettyAvailable(%v) = %v, want %v", c.cp, got, c.want)
		}
		props := LowCPUSystemProps(c.cp)
		if got := props["zookeeper.serverCnxnFactory"] == NettyConnectionFactory; got != c.want {
			t.Errorf("LowCPUSystemProps(%v) = %v", c.cp, props)
		}
	}
}

func TestConfigHasLoopbackAndExtras(t *testing.T) {
	t.Parallel()
	o, err := prepared(Options{Dir: t.TempDir(), ExtraConfig: map[string]string{"forceSync": "no"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.config("/d", 2181, []quorumPeer{{id: 1, quorumPort: 1, elecPort: 2}})
	for _, want := range []string{"clientPortAddress=127.0.0.1\n", "server.1=127.0.0.1:1:2\n", "forceSync=no\n", "4lw.commands.whitelist=srvr,mntr,ruok,stat,conf\n", "admin.enableServer=false\n", "tickTime=2000\n"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if _, err := prepared(Options{Dir: "x", ExtraConfig: map[string]string{"a": "b\nc=d"}}); err == nil {
		t.Error("newline in ExtraConfig value accepted")
	}
}

func TestParseMntrSplitsNamesAndValues(t *testing.T) {
	m, err := parseMntr("a", "zk_version\t3.8.0-1\nzk_server_state\tleader\nzk_znode_count\t42\n")
	if err != nil {
		t.Fatal(err)
	}
	if m["zk_server_state"] != "leader" || m["zk_znode_count"] != "42" || m["zk_version"] != "3.8.0-1" {
		t.Fatalf("parseMntr = %v", m)
	}
	if _, err := parseMntr("a", ""); !errors.Is(err, ErrNotServing) {
		t.Fatalf("empty answer: err = %v, want ErrNotServing", err)
	}
	if _, err := parseMntr("a", "This ZooKeeper instance is not currently serving requests\n"); !errors.Is(err, ErrNotServing) {
		t.Fatalf("not serving: err = %v, want ErrNotServing", err)
	}
}

func TestRoutedPeersKeepSelfAndRouteOthers(t *testing.T) {
	t.Parallel()
	peers := []quorumPeer{{id: 1, quorumPort: 11, elecPort: 12}, {id: 2, quorumPort: 21, elecPort: 22}}
	var calls []PeerLink
	route := func(l PeerLink) (string, error) {
		calls = append(calls, l)
		if l.Port == QuorumPort {
			return "127.0.0.1:9001", nil
		}
		return "127.0.0.1:9002", nil
	}
	view, err := routedPeers(1, peers, route)
	if err != nil {
		t.Fatal(err)
	}
	want := []quorumPeer{{id: 1, quorumPort: 11, elecPort: 12}, {id: 2, quorumPort: 9001, elecPort: 9002}}
	if len(view) != 2 || view[0] != want[0] || view[1] != want[1] {
		t.Fatalf("view = %+v; want %+v", view, want)
	}
	if len(calls) != 2 || calls[0] != (PeerLink{From: 1, To: 2, Port: QuorumPort, Addr: "127.0.0.1:21"}) ||
		calls[1] != (PeerLink{From: 1, To: 2, Port: ElectionPort, Addr: "127.0.0.1:22"}) {
		t.Fatalf("calls = %+v", calls)
	}
	if peers[1].quorumPort != 21 {
		t.Fatal("routedPeers changed its input")
	}
	if v, err := routedPeers(2, peers, nil); err != nil || &v[0] != &peers[0] {
		t.Fatalf("nil route: %v, %v", v, err)
	}
	for _, bad := range []string{"localhost:1", "127.0.0.1", "127.0.0.1:0", "10.0.0.1:5"} {
		if _, err := routedPeers(1, peers, func(PeerLink) (string, error) { return bad, nil }); err == nil {
			t.Errorf("route answer %q accepted", bad)
		}
	}
	if _, err := routedPeers(1, peers, func(PeerLink) (string, error) { return "", errors.New("boom") }); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("route error = %v", err)
	}
}
