package multihost

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The instances' client and internal ports, as the documented commands
// give them.
const (
	clientPort = "2379"
	zkSecret   = "multihost-secret"
)

// tuning is the environment the test adds to the documented commands
// (zketcd reads any flag from ZKETCD_<FLAG>): a root of its own, a short
// session (the leader's death is noticed within it), info logs.
func tuning(root string) []string {
	return []string{"ZKETCD_ZK_ROOT=" + root, "ZKETCD_ZK_SESSION_TIMEOUT=6s", "ZKETCD_LOG_LEVEL=info"}
}

func newRoot() string { return fmt.Sprintf("/multihost-%x", rand.Uint64()) }

// waitServing waits until every instance answers Status from the client's
// host and all name the same leader, and returns the leader's member ID
// and each instance's.
func waitServing(t *testing.T, from *host, ins []*instance) (leader uint64, ids map[*instance]uint64) {
	t.Helper()
	clients := map[*instance]*clientv3.Client{}
	for _, in := range ins {
		clients[in] = from.client(t, in.addr+":"+clientPort)
	}
	eventually(t, "every instance serving, one leader", time.Minute, func() error {
		leader, ids = 0, map[*instance]uint64{}
		for _, in := range ins {
			if err, exited := in.exited(0); exited {
				t.Fatalf("%s exited: %v\n%s", in.name, err, tail(in.log.String(), 30))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := clients[in].Status(ctx, in.addr+":"+clientPort)
			cancel()
			switch {
			case err != nil:
				return fmt.Errorf("%s: %w", in.name, err)
			case len(st.Errors) > 0 || st.Leader == 0:
				return fmt.Errorf("%s: status errors %q, leader %x", in.name, st.Errors, st.Leader)
			case leader != 0 && st.Leader != leader:
				return fmt.Errorf("%s names the leader %x, another instance %x", in.name, st.Leader, leader)
			}
			leader, ids[in] = st.Leader, st.Header.MemberId
		}
		return nil
	})
	return leader, ids
}

func put(t *testing.T, c *clientv3.Client, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, key, value); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// checkAll reads every key of want through c, linearizably.
func checkAll(t *testing.T, c *clientv3.Client, want map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for k, v := range want {
		resp, err := c.Get(ctx, k)
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != v {
			t.Fatalf("get %s through %v: %v %v, want %q", k, c.Endpoints(), resp, err, v)
		}
	}
}

const (
	forwardedPuts = `zketcd_forward_requests_total{method="put",outcome="ok"}`
	servedPuts    = `zketcd_forward_served_total{method="put",outcome="ok"}`
)

// TestInstancesOnSeveralHostsForwardOverMutualTLS follows docs/operations.md
// "Instances on several hosts" on three namespaces: the CA and a
// certificate per instance made by the documented commands, the instances
// started by the documented command. A client on one host writes through
// another host's instance, which forwards to the leader on the third over
// mutual TLS; the leader is killed, the survivors elect one of themselves
// and forward to it; every acknowledged write is there, on both.
func TestInstancesOnSeveralHostsForwardOverMutualTLS(t *testing.T) {
	l := newLab(t, 3)
	steps := docSteps(t)
	dir := t.TempDir()
	sh(t, dir, steps["ca"])
	for _, h := range l.hosts {
		sh(t, dir, steps["cert"], "NAME="+h.name, "ADDR="+h.addr)
	}
	root := newRoot()
	var ins []*instance
	for _, h := range l.hosts {
		ins = append(ins, h.start(t, dir, steps["serve"],
			append(tuning(root), "ZK="+l.zk, "ZK_SECRET="+zkSecret, "NAME="+h.name, "ADDR="+h.addr)...))
	}
	// roles waits for the instances to agree on a leader and returns it and
	// the others.
	roles := func() (leader *instance, followers []*instance, ids map[*instance]uint64) {
		leaderID, ids := waitServing(t, l.hosts[0], ins)
		for _, in := range ins {
			if ids[in] == leaderID {
				leader = in
			} else {
				followers = append(followers, in)
			}
		}
		if leader == nil || len(followers) != 2 {
			t.Fatalf("leader %x is none of %v", leaderID, ids)
		}
		return leader, followers, ids
	}
	_, followers, _ := roles()
	for _, in := range ins {
		if !strings.Contains(in.log.String(), "https://"+in.addr+":2380") {
			t.Fatalf("%s does not advertise its https internal endpoint:\n%s", in.name, tail(in.log.String(), 20))
		}
		if strings.Contains(in.log.String(), "given on the command line") {
			t.Fatalf("%s, started as documented, has a credential on its command line:\n%s", in.name, tail(in.log.String(), 20))
		}
	}
	// A client on one follower's host writes through the other's.
	from, through := followers[0], followers[1]
	c := from.client(t, through.addr+":"+clientPort)
	want := map[string]string{}
	for i := range 20 {
		k, v := fmt.Sprintf("/multihost/before/%02d", i), fmt.Sprintf("v%d", i)
		put(t, c, k, v)
		want[k] = v
	}
	if n := from.metric(t, through.addr+":"+clientPort, forwardedPuts); n < 20 {
		t.Fatalf("%s forwarded %v puts to the leader, want 20", through.name, n)
	}
	served := 0.0
	for _, in := range ins {
		served += from.metric(t, in.addr+":"+clientPort, servedPuts)
	}
	if served < 20 {
		t.Fatalf("the leader served %v forwarded puts, want 20", served)
	}
	t.Logf("%s forwarded 20 puts from a client on %s to the leader over mutual TLS", through.name, from.name)

	// The leader dies; one survivor leads, the other forwards to it.
	leader, followers, ids := roles()
	leader.kill()
	start := time.Now()
	survivors := map[uint64]*instance{ids[followers[0]]: followers[0], ids[followers[1]]: followers[1]}
	status := from.client(t, followers[0].addr+":"+clientPort)
	var next *instance
	eventually(t, "a survivor leads", time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := status.Status(ctx, followers[0].addr+":"+clientPort)
		if err != nil {
			return err
		}
		if next = survivors[st.Leader]; next == nil {
			return fmt.Errorf("leader %x", st.Leader)
		}
		return nil
	})
	t.Logf("%s leads %s after the leader %s was killed", next.name, time.Since(start).Round(100*time.Millisecond), leader.name)
	var other *instance
	for _, in := range followers {
		if in != next {
			other = in
		}
	}
	before := from.metric(t, other.addr+":"+clientPort, forwardedPuts)
	c2 := next.client(t, other.addr+":"+clientPort)
	for i := range 20 {
		k, v := fmt.Sprintf("/multihost/after/%02d", i), fmt.Sprintf("w%d", i)
		put(t, c2, k, v)
		want[k] = v
	}
	if n := from.metric(t, other.addr+":"+clientPort, forwardedPuts) - before; n < 20 {
		t.Fatalf("%s forwarded %v puts to the new leader %s, want 20", other.name, n, next.name)
	}
	for _, in := range followers {
		checkAll(t, from.client(t, in.addr+":"+clientPort), want)
	}
}

// TestInstancesOnSeveralHostsWithTheDefaultInternalEndpoint: the
// documented command without the peer flags. With the default internal
// endpoint (127.0.0.1) the instances cannot reach the leader's: each sees
// from the leader's member znode that its loopback is another host's,
// never dials it (a local user could listen there), warns, and commits
// its own writes: every write through every host is acknowledged once and
// read on all. Given the host's address without TLS, the
// endpoint is refused at start with a message naming what to set.
func TestInstancesOnSeveralHostsWithTheDefaultInternalEndpoint(t *testing.T) {
	l := newLab(t, 3)
	serve := `ZKETCD_ZK_AUTH="digest:zketcd:$ZK_SECRET" zketcd serve --zk "$ZK" --name "$NAME" --listen-client-urls "http://127.0.0.1:2379,http://$ADDR:2379"`
	root := newRoot()
	dir := t.TempDir()
	var ins []*instance
	for _, h := range l.hosts {
		ins = append(ins, h.start(t, dir, serve, append(tuning(root), "ZK="+l.zk, "ZK_SECRET="+zkSecret, "NAME="+h.name, "ADDR="+h.addr)...))
	}
	waitServing(t, l.hosts[0], ins)
	want := map[string]string{}
	for i, through := range ins {
		from := ins[(i+1)%len(ins)]
		c := from.client(t, through.addr+":"+clientPort)
		for j := range 5 {
			k, v := fmt.Sprintf("/multihost/default/%s/%d", through.name, j), fmt.Sprintf("%d", j)
			put(t, c, k, v)
			want[k] = v
		}
	}
	for _, in := range ins {
		checkAll(t, in.client(t, in.addr+":"+clientPort), want)
	}
	warned := 0
	for _, in := range ins {
		if strings.Contains(in.log.String(), "on the loopback of another host") {
			warned++
		}
	}
	if warned < len(ins)-1 {
		t.Errorf("%d followers warned that the leader's loopback endpoint is on another host, want %d", warned, len(ins)-1)
	}

	refused := l.hosts[0].start(t, dir, serve+` --internal-listen-url "http://$ADDR:2380"`,
		append(tuning(newRoot()), "ZK="+l.zk, "ZK_SECRET="+zkSecret, "NAME=refused", "ADDR="+l.hosts[0].addr)...)
	err, exited := refused.exited(time.Minute)
	if !exited || err == nil {
		t.Fatalf("a plaintext internal endpoint on %s started (exited %v, %v)", l.hosts[0].addr, exited, err)
	}
	msg := refused.log.String()
	for _, flag := range []string{"--internal-listen-url https://" + l.hosts[0].addr + ":2380", "--peer-cert-file", "--peer-key-file",
		"--peer-trusted-ca-file", "--peer-client-cert-auth", "--internal-insecure-plaintext"} {
		if !strings.Contains(msg, flag) {
			t.Errorf("the refusal does not say %q:\n%s", flag, msg)
		}
	}
}
