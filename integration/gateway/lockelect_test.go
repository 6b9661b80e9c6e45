package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	epb "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	lpb "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/testutil"
)

// outcome is one RPC's result, comparable across servers: the revision
// and what the client can see of a key (its prefix, without the lease id
// that ends it), or the error's code and message.
type outcome struct {
	Rev   int64
	Key   string
	Value string
	Err   string
}

func keyPrefix(k []byte) string {
	s := string(k)
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[:i+1] + "LEASE"
	}
	return s
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "deadline exceeded"
	}
	st, _ := status.FromError(err)
	return fmt.Sprintf("%s: %s", st.Code(), st.Message())
}

// lockElectScript runs the same v3lock and v3election calls on c and
// returns their outcomes.
func lockElectScript(t *testing.T, c *clientv3.Client) []outcome {
	t.Helper()
	lock, elect := lpb.NewLockClient(c.ActiveConnection()), epb.NewElectionClient(c.ActiveConnection())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []outcome
	add := func(rev int64, key []byte, value []byte, err error) {
		out = append(out, outcome{Rev: rev, Key: keyPrefix(key), Value: string(value), Err: errText(err)})
	}
	l1, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	// Lock, a second holder waits (and gives up), unlock, the second gets it.
	lr, err := lock.Lock(ctx, &lpb.LockRequest{Name: []byte("l"), Lease: int64(l1.ID)})
	add(lr.GetHeader().GetRevision(), lr.GetKey(), nil, err)
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	lr2, err := lock.Lock(short, &lpb.LockRequest{Name: []byte("l"), Lease: int64(l2.ID)})
	cancelShort()
	add(lr2.GetHeader().GetRevision(), lr2.GetKey(), nil, err)
	// The abandoned waiter deletes its key after the client has given up
	// (on both servers): wait for that, so that revisions stay in step.
	testutil.Eventually(t, 10*time.Second, "the abandoned lock waiter's key gone", func() bool {
		g, err := c.Get(ctx, "l/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return g.Count == 1
	})
	ur, err := lock.Unlock(ctx, &lpb.UnlockRequest{Key: lr.GetKey()})
	add(ur.GetHeader().GetRevision(), nil, nil, err)
	lr3, err := lock.Lock(ctx, &lpb.LockRequest{Name: []byte("l"), Lease: int64(l2.ID)})
	add(lr3.GetHeader().GetRevision(), lr3.GetKey(), nil, err)
	_, err = lock.Lock(ctx, &lpb.LockRequest{Name: []byte("x"), Lease: 424242})
	add(0, nil, nil, err)
	// Election: no leader, campaign, observe, proclaim, resign.
	_, err = elect.Leader(ctx, &epb.LeaderRequest{Name: []byte("e")})
	add(0, nil, nil, err)
	cr, err := elect.Campaign(ctx, &epb.CampaignRequest{Name: []byte("e"), Lease: int64(l1.ID), Value: []byte("v1")})
	add(cr.GetHeader().GetRevision(), cr.GetLeader().GetKey(), nil, err)
	obsCtx, cancelObs := context.WithCancel(ctx)
	obs, err := elect.Observe(obsCtx, &epb.LeaderRequest{Name: []byte("e")})
	if err != nil {
		t.Fatal(err)
	}
	first, err := obs.Recv()
	add(first.GetHeader().GetRevision(), first.GetKv().GetKey(), first.GetKv().GetValue(), err)
	pr, err := elect.Proclaim(ctx, &epb.ProclaimRequest{Leader: cr.GetLeader(), Value: []byte("v2")})
	add(pr.GetHeader().GetRevision(), nil, nil, err)
	next, err := obs.Recv()
	add(next.GetHeader().GetRevision(), next.GetKv().GetKey(), next.GetKv().GetValue(), err)
	cancelObs()
	ld, err := elect.Leader(ctx, &epb.LeaderRequest{Name: []byte("e")})
	add(ld.GetHeader().GetRevision(), ld.GetKv().GetKey(), ld.GetKv().GetValue(), err)
	_, err = elect.Proclaim(ctx, &epb.ProclaimRequest{Value: []byte("v3")})
	add(0, nil, nil, err)
	wrong := &epb.LeaderKey{Name: []byte("e"), Key: []byte("e/nope"), Rev: 1, Lease: int64(l2.ID)}
	_, err = elect.Proclaim(ctx, &epb.ProclaimRequest{Leader: wrong, Value: []byte("v3")})
	add(0, nil, nil, err)
	rr, err := elect.Resign(ctx, &epb.ResignRequest{Leader: cr.GetLeader()})
	add(rr.GetHeader().GetRevision(), nil, nil, err)
	_, err = elect.Leader(ctx, &epb.LeaderRequest{Name: []byte("e")})
	add(0, nil, nil, err)
	return out
}

func TestLockAndElectionAnswerAsEtcd(t *testing.T) {
	etcd, zketcd := startPair(t)
	want := lockElectScript(t, etcdoracle.NewClient(t, strings.TrimPrefix(etcd.base, "http://")))
	got := lockElectScript(t, etcdoracle.NewClient(t, strings.TrimPrefix(zketcd.base, "http://")))
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("v3lock/v3election (-etcd +zketcd):\n%s", d)
	}
	t.Logf("%d calls answered alike", len(want))
}

// etcdctlPath is $ETCDCTL or the binary integration/bench/build-peers.sh
// builds.
func etcdctlPath(t *testing.T) string {
	if p := os.Getenv("ETCDCTL"); p != "" {
		return p
	}
	home, _ := os.UserHomeDir()
	p := filepath.Join(home, ".cache", "zketcd", "etcd-v3.7.3", "etcdctl")
	if _, err := os.Stat(p); err != nil {
		t.Skip("no etcdctl 3.7.3 ($ETCDCTL, or integration/bench/build-peers.sh etcdctl)")
	}
	return p
}

func TestEtcdctlLockAndElectAsOnEtcd(t *testing.T) {
	ctl := etcdctlPath(t)
	etcd, zketcd := startPair(t)
	run := func(tg *target) []string {
		ep := "--endpoints=" + strings.TrimPrefix(tg.base, "http://")
		var out []string
		cmd := func(timeout time.Duration, args ...string) string {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			b, err := exec.CommandContext(ctx, ctl, append([]string{ep}, args...)...).CombinedOutput()
			s := string(b)
			if err != nil && ctx.Err() == nil {
				s += "error: " + err.Error()
			}
			// Lock and leader keys end with a lease id in hex.
			lines := strings.Split(s, "\n")
			for i, l := range lines {
				if strings.HasPrefix(l, "mylock/") || strings.HasPrefix(l, "myelect/") {
					lines[i] = l[:strings.IndexByte(l, '/')+1] + "LEASE"
				}
			}
			return strings.Join(lines, "\n")
		}
		out = append(out, cmd(10*time.Second, "lock", "mylock", "--", "echo", "holding"))
		out = append(out, cmd(10*time.Second, "lock", "--ttl=5", "mylock", "--", "echo", "again"))
		// A campaign holds leadership until it is killed; meanwhile the
		// leader is seen.
		done := make(chan string, 1)
		go func() { done <- cmd(4*time.Second, "elect", "myelect", "v1") }()
		time.Sleep(1500 * time.Millisecond)
		out = append(out, cmd(1500*time.Millisecond, "elect", "-l", "myelect"))
		out = append(out, <-done)
		out = append(out, cmd(5*time.Second, "get", "--prefix", "my", "--keys-only"))
		return out
	}
	want, got := run(etcd), run(zketcd)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("etcdctl lock/elect (-etcd +zketcd):\n%s", d)
	}
	t.Logf("etcdctl lock/elect outputs:\n%s", strings.Join(want, "\n--\n"))
}
