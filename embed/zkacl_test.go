package embed_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/metadata"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// TestWorldReadableRootIsWarnedAndRefusesAuthEnable: outside zketcd dev,
// a root anyone may read is reported in Status and /health, and
// authentication is not enabled on it (its tokens could be minted from
// ZooKeeper's data), with the flag that fixes it named.
func TestWorldReadableRootIsWarnedAndRefusesAuthEnable(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{StrictZooKeeper: true})
	c := in.Client(t)
	ctx := ctx30s(t)
	st, err := c.Status(ctx, in.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(st.Errors, "\n"), "world-readable") || !strings.Contains(strings.Join(st.Errors, "\n"), "--zk-auth") {
		t.Fatalf("Status errors %q: want the world-readable root and --zk-auth", st.Errors)
	}
	resp, err := http.Get("http://" + in.Endpoint() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var h struct {
		Health   string   `json:"health"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" || len(h.Warnings) != 1 || !strings.Contains(h.Warnings[0], "--zk-auth") {
		t.Fatalf("/health %d %s (%v): want healthy with the warning", resp.StatusCode, body, err)
	}
	if _, err := c.UserAdd(ctx, "root", "rootpw"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil && !strings.Contains(err.Error(), "role name not found") {
		t.Fatal(err)
	}
	_, err = c.AuthEnable(ctx)
	if err == nil || !strings.Contains(err.Error(), "--zk-auth") {
		t.Fatalf("AuthEnable on a world-readable root: %v, want a refusal naming --zk-auth", err)
	}
	if s, err := c.AuthStatus(ctx); err != nil || s.Enabled {
		t.Fatalf("auth status after the refusal: %+v %v", s, err)
	}
	if v := worldReadableGauge(t, in); v != 1 {
		t.Fatalf("zketcd_zookeeper_world_readable %v, want 1", v)
	}
}

// TestClosedRootWithOpenChildrenIsWorldReadable: a root closed by hand
// (setAcl ip:127.0.0.1) to an instance without --zk-auth is not closed:
// the instance creates every znode under it with world:anyone, and
// ZooKeeper checks no parent's ACL on a read, so an anonymous session reads
// the log by its paths. Such a root is reported and refuses AuthEnable as
// an open one does.
func TestClosedRootWithOpenChildrenIsWorldReadable(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	const root = "/closed-by-hand"
	admin, _, err := zk.Connect([]string{zkSrv.Addr()}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Create(root, nil, 0, []zk.ACL{{Perms: zk.PermAll, Scheme: "ip", ID: "127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	in := embedtest.Start(t, []string{zkSrv.Addr()}, fastBcrypt(embedtest.Options{Root: root, StrictZooKeeper: true}))
	c := in.Client(t)
	ctx := ctx30s(t)
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	entry := fmt.Sprintf("%s/log/%010d/%020d", root, 0, in.Engine().State().LSN)
	acl, _, err := admin.GetACL(entry)
	if err != nil {
		t.Fatal(err)
	}
	if len(acl) != 1 || acl[0].Scheme != "world" {
		t.Fatalf("the log entry's ACL %v: want the instance to have created it open (the premise of the test)", acl)
	}

	st, err := c.Status(ctx, in.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(st.Errors, "\n"), "world-readable") {
		t.Errorf("Status errors %q: want the world-readable root", st.Errors)
	}
	resp, err := http.Get("http://" + in.Endpoint() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "--zk-auth") {
		t.Errorf("/health %s: want the warning", body)
	}
	if v := worldReadableGauge(t, in); v != 1 {
		t.Errorf("zketcd_zookeeper_world_readable %v, want 1", v)
	}
	if _, err := c.UserAdd(ctx, "root", "rootpw"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RoleAdd(ctx, "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err = c.AuthEnable(ctx); err == nil || !strings.Contains(err.Error(), "--zk-auth") {
		t.Fatalf("AuthEnable on a root whose children are open: %v, want a refusal naming --zk-auth", err)
	}
}

// worldReadableGauge reads the instance's zketcd_zookeeper_world_readable.
func worldReadableGauge(t *testing.T, in *embedtest.Instance) float64 {
	t.Helper()
	mfs, err := in.Zketcd().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "zketcd_zookeeper_world_readable" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no zketcd_zookeeper_world_readable metric")
	return 0
}

// TestZooKeeperReadMintsNoTokenOnceTheRootHasAnIdentity: a root made
// without --zk-auth, auth enabled on it (as zketcd dev allows), then the
// instance restarted with an identity: every znode, the log entries that
// hold the password hashes and the token secret included, is closed to a
// ZooKeeper session without the identity, so no token can be minted from
// ZooKeeper's data.
func TestZooKeeperReadMintsNoTokenOnceTheRootHasAnIdentity(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	root := "/mint"
	in := embedtest.Start(t, []string{zkSrv.Addr()}, fastBcrypt(embedtest.Options{Root: root}))
	enableAuth(t, in.Client(t))
	in.Close()
	anon, _, err := zk.Connect([]string{zkSrv.Addr()}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	entries, _, err := anon.Children(root + "/log/0000000000")
	if err != nil || len(entries) < 10 {
		t.Fatalf("the open root's log: %v %v", entries, err)
	}
	readable := func() (n int) {
		for _, e := range entries {
			if _, _, err := anon.Get(root + "/log/0000000000/" + e); err == nil {
				n++
			} else if !errors.Is(err, zk.ErrNoAuth) {
				t.Fatalf("read entry %s: %v", e, err)
			}
		}
		return n
	}
	if n := readable(); n != len(entries) {
		t.Fatalf("before the identity %d of %d entries are readable", n, len(entries))
	}

	secured := embedtest.Start(t, []string{zkSrv.Addr()}, fastBcrypt(embedtest.Options{Root: root, StrictZooKeeper: true, ZKAuth: []string{"digest:zketcd:s3cret"}}))
	if n := readable(); n != 0 {
		t.Fatalf("after the identity, %d log entries (the auth state among them) are readable without it", n)
	}
	for _, p := range []string{root, root + "/meta", root + "/head", root + "/members", root + "/compact"} {
		if _, _, err := anon.Get(p); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("read %s without the identity: %v", p, err)
		}
	}
	rc, err := userClient(t, secured.Endpoint(), "root", "rootpw")
	if err != nil {
		t.Fatal(err)
	}
	st, err := rc.Status(ctx30s(t), secured.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Errors) != 0 {
		t.Fatalf("Status errors on a closed root: %q", st.Errors)
	}
	if v := worldReadableGauge(t, secured); v != 0 {
		t.Fatalf("zketcd_zookeeper_world_readable %v on a closed root", v)
	}
	checkAlice(t, secured.Endpoint())
}

// TestPasswordGuessingNeverLocksTheUserOut: a guesser sends about 20 wrong
// passwords a second for alice from the same address as alice, who logs
// in with the right one meanwhile: every one of alice's logins succeeds,
// in bounded time (etcd 3.7.3 refuses none of them either); no guess is
// refused unchecked, each is answered "authentication failed". A guesser
// that waits for each answer is slowed to about one guess a second once
// its few free failures are spent.
func TestPasswordGuessingNeverLocksTheUserOut(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, fastBcrypt(embedtest.Options{}))
	enableAuth(t, in.Client(t))
	ac := pb.NewAuthClient(in.Client(t).ActiveConnection())
	ctx := ctx30s(t)
	try := func(pw string) (time.Duration, error) {
		start := time.Now()
		_, err := ac.Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: pw})
		return time.Since(start), err
	}

	const run = 4 * time.Second
	var guesses, refused atomic.Int64
	var wg sync.WaitGroup
	stop := time.After(run)
	tick := time.NewTicker(50 * time.Millisecond) // ~20 guesses a second
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := try(fmt.Sprintf("guess-%d", i))
				guesses.Add(1)
				if !errors.Is(err, rpctypes.ErrGRPCAuthFailed) {
					refused.Add(1)
					t.Errorf("guess %d: %v, want authentication failed", i, err)
				}
			}()
		}
	}()
	var logins int
	var slowest time.Duration
	for deadline := time.Now().Add(run); time.Now().Before(deadline); logins++ {
		took, err := try("alicepw")
		if err != nil {
			t.Errorf("alice's login %d while guessing goes on: %v", logins, err)
			break
		}
		slowest = max(slowest, took)
		time.Sleep(150 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("%d guesses, %d of alice's logins, the slowest in %v", guesses.Load(), logins, slowest)
	if slowest > 10*time.Second {
		t.Errorf("alice's slowest login took %v", slowest)
	}

	// Sequential guesses: each answer waits once the free failures are
	// spent (an upper bound only: a slow machine makes fewer).
	var answered int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); answered++ {
		if _, err := try("sequential"); !errors.Is(err, rpctypes.ErrGRPCAuthFailed) {
			t.Fatalf("sequential guess: %v", err)
		}
	}
	t.Logf("a guesser waiting for each answer: %d guesses answered in 3 s", answered)
	if answered > 8 {
		t.Errorf("a guesser waiting for each answer made %d guesses in 3 s, want it slowed to about one a second", answered)
	}
	if _, err := try("alicepw"); err != nil {
		t.Fatalf("alice after the guessing: %v", err)
	}
}

// TestSimpleTokensKeyedInZooKeeperAreWarnedAtEveryStart: with
// authentication enabled and simple tokens signed by the auth store's
// secret alone (which a reader of ZooKeeper's data, or of a backup, has),
// every start warns; with a secret file it does not.
func TestSimpleTokensKeyedInZooKeeperAreWarnedAtEveryStart(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	secret := filepath.Join(t.TempDir(), "token.secret")
	if err := os.WriteFile(secret, bytes.Repeat([]byte("s"), 32), 0o600); err != nil {
		t.Fatal(err)
	}
	var out *embedtest.SyncBuffer
	withFile := false
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{Configure: func(c *embed.Config) {
		c.GRPC.Auth.BcryptCost = bcrypt.MinCost
		out = &embedtest.SyncBuffer{}
		lg := logrus.New()
		lg.SetOutput(out)
		c.Logger = logrus.NewEntry(lg)
		if withFile {
			tokens, err := auth.NewTokenProvider("simple,secret-file="+secret, 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			c.GRPC.Auth.Tokens = tokens
		}
	}})
	const warning = "simple tokens signed by a secret kept in ZooKeeper"
	if strings.Contains(out.String(), warning) {
		t.Fatal("warned with authentication off")
	}
	enableAuth(t, in.Client(t))
	in.Restart()
	if !strings.Contains(out.String(), warning) {
		t.Fatalf("a start with authentication on and simple tokens keyed in ZooKeeper did not warn:\n%s", out.String())
	}
	withFile = true
	in.Restart()
	if strings.Contains(out.String(), warning) {
		t.Fatalf("warned with a secret file:\n%s", out.String())
	}
}

// TestAnIdentityAddedToAnOpenRootRotatesTheTokenSecret: while a root is
// open, anyone who reaches ZooKeeper copies the auth state from the log
// (the simple tokens' secret and root's password hash) and can mint root's
// token from it. Once the root gets an identity — at the start of an
// instance with --zk-auth, or by zketcd zk-acl before that start — a token
// minted from that copy is refused from the instance's first request on,
// while root logs in as before.
func TestAnIdentityAddedToAnOpenRootRotatesTheTokenSecret(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	const identity = "digest:zketcd:s3cret"
	for _, tc := range []struct {
		name  string
		reACL func(t *testing.T, root string)
	}{
		{"restarted with --zk-auth", func(*testing.T, string) {}},
		{"zketcd zk-acl, then restarted", func(t *testing.T, root string) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lg := testutil.Logger(logrus.WarnLevel)
			s, err := zkstore.OpenInspector(ctx, zkstore.Config{Servers: []string{zkSrv.Addr()}, Root: root, Auth: []string{identity}, Logger: lg})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.ReACL(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := "/rotate-" + strings.ReplaceAll(tc.name, " ", "-")
			in := embedtest.Start(t, []string{zkSrv.Addr()}, fastBcrypt(embedtest.Options{Root: root}))
			enableAuth(t, in.Client(t))
			// The copy: the latest auth state in the open root's log.
			var copied []byte
			for _, e := range logOf(t, zkSrv.Addr(), root) {
				for _, op := range e.Ops {
					if op.Kind == revision.OpAuth {
						copied = op.Auth
					}
				}
			}
			st, err := auth.Decode(copied)
			if err != nil || !st.Enabled {
				t.Fatalf("the copied auth state: %v", err)
			}
			mint, err := auth.NewTokenProvider("simple", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			defer mint.Close()
			minted, err := mint.Assign("root", st, 0)
			if err != nil {
				t.Fatal(err)
			}
			kv := pb.NewKVClient(rawConn(t, in.Endpoint()))
			ctx := ctx30s(t)
			put := func() error {
				_, err := kv.Put(metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, minted), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
				return err
			}
			if err := put(); err != nil {
				t.Fatalf("root's token minted from the open root's data, before the identity: %v (the premise of the test)", err)
			}
			in.Close()

			tc.reACL(t, root)
			secured := embedtest.Start(t, []string{zkSrv.Addr()}, fastBcrypt(embedtest.Options{Root: root, StrictZooKeeper: true, ZKAuth: []string{identity}}))
			kv = pb.NewKVClient(rawConn(t, secured.Endpoint()))
			if err := put(); !errors.Is(rpctypes.Error(err), rpctypes.ErrInvalidAuthToken) {
				t.Fatalf("the minted token after the identity was added: %v, want %v", err, rpctypes.ErrInvalidAuthToken)
			}
			checkAlice(t, secured.Endpoint())
			// Rotated once: a restart keeps the secret.
			rc, err := userClient(t, secured.Endpoint(), "root", "rootpw")
			if err != nil {
				t.Fatal(err)
			}
			before, _ := secured.Engine().AuthState()
			secured.Restart()
			after, _ := secured.Engine().AuthState()
			if !bytes.Equal(before, after) {
				t.Fatal("the auth state changed at a restart with the same identity")
			}
			if _, err := rc.Get(ctx, "k"); err != nil {
				t.Fatalf("root after the restart: %v", err)
			}
		})
	}
}
