package embed_test

// Attacks on the internal endpoint between instances: whoever reaches it,
// even holding its token (the member znode advertises it), gets no more
// than the credentials it forwards allow.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	zkclient "github.com/go-zookeeper/zk"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/forward"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// forwardingLeader starts one forwarding instance (the leader of its
// root) with quick password hashes, configured further by configure.
func forwardingLeader(t *testing.T, zk string, configure func(*embed.Config)) *embedtest.Instance {
	t.Helper()
	in := embedtest.Start(t, []string{zk}, embedtest.Options{ForwardWrites: true, SessionTimeout: 4 * time.Second,
		Configure: func(c *embed.Config) {
			c.GRPC.Auth.BcryptCost = bcrypt.MinCost
			if configure != nil {
				configure(c)
			}
		}})
	waitLeader(t, in)
	return in
}

func waitLeader(t *testing.T, in *embedtest.Instance) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "the instance leads", func() bool { l, _ := in.Engine().Leader(); return l })
}

// addRoot adds the root user with the root role, what AuthEnable needs.
func addRoot(t *testing.T, ctx context.Context, c *clientv3.Client) {
	t.Helper()
	for _, step := range []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := c.RoleAdd(ctx, "root"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}

// login returns a client of user at endpoint and its token.
func login(t *testing.T, ctx context.Context, endpoint, user, password string) (*clientv3.Client, string) {
	t.Helper()
	c, err := userClient(t, endpoint, user, password)
	if err != nil {
		t.Fatalf("%s's login: %v", user, err)
	}
	resp, err := c.Authenticate(ctx, user, password)
	if err != nil {
		t.Fatalf("%s's token: %v", user, err)
	}
	return c, resp.Token
}

// attacker forwards requests to in's internal endpoint as another instance
// would, holding its token.
type attacker struct {
	c    *forward.Client
	peer engine.Peer
	in   *embedtest.Instance
}

func newAttacker(t *testing.T, in *embedtest.Instance, scheme string, tlsCfg *tls.Config) *attacker {
	c := forward.NewClient()
	c.TLS = tlsCfg
	t.Cleanup(c.Close)
	return &attacker{c: c, in: in, peer: engine.Peer{ID: in.Engine().MemberID(), URL: scheme + in.Zketcd().InternalAddr(), Token: in.Engine().InternalToken()}}
}

// send forwards req on behalf of caller, with the fingerprint of the
// leader's auth state (which read access to ZooKeeper gives) and entropy.
func (a *attacker) send(ctx context.Context, caller auth.Caller, req proto.Message, entropy []byte) error {
	k, ok := engine.WriteKindOf(req)
	if !ok {
		return errors.New("not forwardable")
	}
	state, _ := a.in.Engine().AuthState()
	var fp uint64
	if len(state) > 0 {
		fp = crc64.Checksum(state, crc64.MakeTable(crc64.ECMA)) | 1
	}
	_, err := a.c.Forward(auth.WithCaller(ctx, caller), a.peer, engine.ForwardCall{
		Origin: revision.WriterTag{Nonce: rand.Uint64(), Seq: 1}, AuthFP: fp, Req: req, Resp: k.NewResponse(), Entropy: entropy, Fresh: true,
	})
	return err
}

// TestForwardedWritesWithoutTheirCallersCredentialAreRefused: with auth
// on, a holder of the internal endpoint's token forwards AuthDisable, a
// UserAdd with a hash of its choosing and a Put: with no caller, a forged
// token, a common name its plaintext connection cannot vouch for, or a
// user without the permission, the leader refuses each and nothing is
// applied; root's own token is what it takes.
func TestForwardedWritesWithoutTheirCallersCredentialAreRefused(t *testing.T) {
	zk := zkservertest.Standalone(t).Addr()
	in := forwardingLeader(t, zk, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	enableAuth(t, in.Client(t))
	rootC, rootTok := login(t, ctx, in.Endpoint(), "root", "rootpw")
	_, aliceTok := login(t, ctx, in.Endpoint(), "alice", "alicepw")
	a := newAttacker(t, in, "http://", nil)

	hash, _ := bcrypt.GenerateFromPassword([]byte("mallory"), bcrypt.MinCost)
	requests := map[string]proto.Message{
		"AuthDisable": &pb.AuthDisableRequest{},
		"UserAdd":     &pb.AuthUserAddRequest{Name: "mallory", HashedPassword: base64.StdEncoding.EncodeToString(hash)},
		"Put":         &pb.PutRequest{Key: []byte("owned"), Value: []byte("by mallory")},
	}
	callers := map[string]auth.Caller{
		"no caller":               {},
		"a forged token":          {Token: base64.RawURLEncoding.EncodeToString([]byte("root")) + ".1.AAAAAAAAAAAAAAAAAAAAAA"},
		"root's name, unverified": {CertCN: "root"},
		"alice, not root nor a writer of the key": {Token: aliceTok},
	}
	for rname, req := range requests {
		for cname, caller := range callers {
			err := a.send(ctx, caller, req, bytes.Repeat([]byte{7}, 32))
			switch {
			case err == nil:
				t.Errorf("%s with %s: accepted", rname, cname)
			case caller.Empty() && !errors.Is(err, engine.ErrNotSent):
				// What an instance of an older build, which forwards no
				// credentials, relies on to commit the write itself.
				t.Errorf("%s with %s: %v, want it refused as not sent", rname, cname, err)
			}
		}
	}
	if st, err := rootC.AuthStatus(ctx); err != nil || !st.Enabled {
		t.Fatalf("auth status after the attempts: %v %v (want enabled)", st, err)
	}
	if _, err := rootC.UserGet(ctx, "mallory"); !errors.Is(err, rpctypes.ErrUserNotFound) {
		t.Fatalf("mallory after the attempts: %v, want no such user", err)
	}
	if resp, err := rootC.Get(ctx, "owned"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the attacker's key: %v %v", resp, err)
	}
	// The path itself works for a caller with the permission.
	if err := a.send(ctx, auth.Caller{Token: rootTok}, requests["Put"], nil); err != nil {
		t.Fatalf("a Put forwarded with root's token: %v", err)
	}
	if resp, err := rootC.Get(ctx, "owned"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the Put forwarded with root's token: %v %v", resp, err)
	}
}

// TestForwardedAuthEnableDoesNotTakeTheCallersEntropy: AuthEnable's
// entropy is the simple tokens' secret; a caller forwarding AuthEnable
// with bytes of its choosing cannot then mint root's token from them (and
// the password hash that read access to ZooKeeper shows).
func TestForwardedAuthEnableDoesNotTakeTheCallersEntropy(t *testing.T) {
	zk := zkservertest.Standalone(t).Addr()
	in := forwardingLeader(t, zk, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := in.Client(t)
	addRoot(t, ctx, c)
	chosen := bytes.Repeat([]byte("mallory!"), 4)
	if err := newAttacker(t, in, "http://", nil).send(ctx, auth.Caller{}, &pb.AuthEnableRequest{}, chosen); err != nil {
		t.Fatalf("forwarded AuthEnable (auth off: anyone may): %v", err)
	}
	raw, _ := in.Engine().AuthState()
	st, err := auth.Decode(raw)
	if err != nil || !st.Enabled {
		t.Fatalf("auth after the forwarded AuthEnable: %v (enabled %v)", err, st != nil && st.Enabled)
	}
	issued := strconv.FormatInt(time.Now().UnixMilli(), 10)
	m := hmac.New(sha256.New, chosen)
	for _, part := range [][]byte{[]byte("zketcd simple token"), []byte("root"), []byte(issued), st.User("root").Password} {
		var n [binary.MaxVarintLen64]byte
		m.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		m.Write(part)
	}
	minted := base64.RawURLEncoding.EncodeToString([]byte("root")) + "." + issued + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
	kv := pb.NewKVClient(rawConn(t, in.Endpoint()))
	_, err = kv.Put(metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, minted), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	if !errors.Is(rpctypes.Error(err), rpctypes.ErrInvalidAuthToken) {
		t.Fatalf("a Put with root's token minted from the chosen entropy: %v, want %v", err, rpctypes.ErrInvalidAuthToken)
	}
}

// TestForwardedAuthEnableIsRefusedWhileZooKeeperIsWorldReadable: the
// leader refuses a forwarded AuthEnable on a world-readable root as the
// client API does, and as the request's final failure: while auth is off
// it carries no caller's credential, and a refusal of a request without
// one tells its origin that nothing ran and that it may commit it itself,
// past the leader's check.
func TestForwardedAuthEnableIsRefusedWhileZooKeeperIsWorldReadable(t *testing.T) {
	zk := zkservertest.Standalone(t).Addr()
	in := embedtest.Start(t, []string{zk}, embedtest.Options{ForwardWrites: true, StrictZooKeeper: true, SessionTimeout: 4 * time.Second,
		Configure: func(c *embed.Config) { c.GRPC.Auth.BcryptCost = bcrypt.MinCost }})
	waitLeader(t, in)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := in.Client(t)
	addRoot(t, ctx, c)
	err := newAttacker(t, in, "http://", nil).send(ctx, auth.Caller{}, &pb.AuthEnableRequest{}, nil)
	var final *engine.FinalError
	if !errors.As(err, &final) || errors.Is(err, engine.ErrNotSent) || !strings.Contains(err.Error(), "world-readable") {
		t.Fatalf("a forwarded AuthEnable on a world-readable root: %v, want the final refusal naming the world-readable root", err)
	}
	if st, err := c.AuthStatus(ctx); err != nil || st.Enabled {
		t.Fatalf("auth status after the refusal: %v %v", st, err)
	}
}

// TestInternalEndpointRefusesPeersWithoutAVerifiedCertificate: under
// --peer-client-cert-auth and --peer-cert-allowed-cn, a caller holding the
// token gets nothing without a certificate from the peer CA, with one from
// another CA, with one of a common name not allowed, or in plaintext; an
// allowed peer is served.
func TestInternalEndpointRefusesPeersWithoutAVerifiedCertificate(t *testing.T) {
	certs := testcerts.New(t)
	cert, key := certs.Peer(t, "zketcd-a", "127.0.0.1")
	in := forwardingLeader(t, zkservertest.Standalone(t).Addr(), func(c *embed.Config) {
		c.Peer = embed.PeerTLS{CertFile: cert, KeyFile: key, TrustedCAFile: certs.CAFile, ClientCertAuth: true,
			AllowedCNs: []string{"zketcd-a", "zketcd-b"}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clientWith := func(certFile, keyFile string) *tls.Config {
		cfg := &tls.Config{RootCAs: certs.CA, MinVersion: tls.VersionTLS12}
		if certFile != "" {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		return cfg
	}
	other := testcerts.New(t)
	otherCert, otherKey := other.Peer(t, "zketcd-b", "127.0.0.1")
	malCert, malKey := certs.Peer(t, "mallory", "127.0.0.1")
	goodCert, goodKey := certs.Peer(t, "zketcd-b", "127.0.0.1")
	for name, tc := range map[string]struct {
		scheme string
		tls    *tls.Config
		ok     bool
	}{
		"no certificate":              {"https://", clientWith("", ""), false},
		"a certificate of another CA": {"https://", clientWith(otherCert, otherKey), false},
		"a common name not allowed":   {"https://", clientWith(malCert, malKey), false},
		"plaintext":                   {"http://", nil, false},
		"an allowed peer":             {"https://", clientWith(goodCert, goodKey), true},
	} {
		a := newAttacker(t, in, tc.scheme, tc.tls)
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := a.c.Call(rctx, a.peer, readIndexCall(), &emptypb.Empty{}, &wrapperspb.Int64Value{})
		rcancel()
		if (err == nil) != tc.ok {
			t.Errorf("%s: read index answered %v, want ok %v", name, err, tc.ok)
		}
	}
}

// recorder is a TCP proxy that keeps every byte it carries.
type recorder struct {
	lis    net.Listener
	target atomic.Value // string
	mu     sync.Mutex
	seen   bytes.Buffer
}

func newRecorder(t *testing.T) *recorder {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{lis: lis}
	t.Cleanup(func() { lis.Close() })
	go r.serve()
	return r
}

func (r *recorder) serve() {
	for {
		c, err := r.lis.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			t, _ := r.target.Load().(string)
			up, err := net.Dial("tcp", t)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			pipe := func(dst io.Writer, src io.Reader) {
				_, _ = io.Copy(io.MultiWriter(dst, r), src)
				done <- struct{}{}
			}
			go pipe(up, c)
			go pipe(c, up)
			<-done
		}()
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen.Write(p)
}

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.seen.Bytes())
}

// TestForwardedTrafficIsNotInClear: with peer TLS (mutual, or
// --peer-auto-tls), a write forwarded by a follower crosses the wire
// encrypted: neither the endpoint's token, nor the client's token, nor the
// key and value appear in the bytes between the instances.
func TestForwardedTrafficIsNotInClear(t *testing.T) {
	zk := zkservertest.Standalone(t).Addr()
	certs := testcerts.New(t)
	for name, peerTLS := range map[string]func(cn string) embed.PeerTLS{
		"mutual TLS": func(cn string) embed.PeerTLS {
			cert, key := certs.Peer(t, cn, "127.0.0.1")
			return embed.PeerTLS{CertFile: cert, KeyFile: key, TrustedCAFile: certs.CAFile, ClientCertAuth: true}
		},
		"auto TLS": func(string) embed.PeerTLS { return embed.PeerTLS{AutoTLS: true} },
	} {
		rec := newRecorder(t)
		leader := forwardingLeader(t, zk, func(c *embed.Config) {
			c.Peer = peerTLS("zketcd-a")
			c.InternalURL = "https://" + rec.lis.Addr().String()
		})
		rec.target.Store(leader.Zketcd().InternalAddr())
		follower := embedtest.Start(t, []string{zk}, embedtest.Options{Root: leader.Root(), ForwardWrites: true, SessionTimeout: 4 * time.Second,
			Configure: func(c *embed.Config) {
				c.GRPC.Auth.BcryptCost = bcrypt.MinCost
				c.Peer = peerTLS("zketcd-b")
			}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		enableAuth(t, follower.Client(t))
		rootC, rootTok := login(t, ctx, follower.Endpoint(), "root", "rootpw")
		forwarded := map[string]string{"method": "put", "outcome": "ok"}
		before := counter(t, follower, "zketcd_forward_requests_total", forwarded)
		if _, err := rootC.Put(ctx, "secret-key-4711", "secret-value-0815"); err != nil {
			t.Fatal(err)
		}
		if n := counter(t, follower, "zketcd_forward_requests_total", forwarded) - before; n != 1 {
			t.Fatalf("%s: the follower forwarded %v puts, want 1", name, n)
		}
		seen := rec.bytes()
		if len(seen) == 0 || seen[0] != 0x16 {
			t.Fatalf("%s: %d bytes between the instances, first %x: want a TLS session", name, len(seen), seen[:min(1, len(seen))])
		}
		for what, secret := range map[string]string{
			"the endpoint's token": leader.Engine().InternalToken(), "root's token": rootTok,
			"the key": "secret-key-4711", "the value": "secret-value-0815", "the password": "rootpw",
		} {
			if bytes.Contains(seen, []byte(secret)) {
				t.Errorf("%s: %s crossed the wire in clear", name, what)
			}
		}
	}
}

// counter reads a counter of in's registry (0 if absent).
func counter(t *testing.T, in *embedtest.Instance, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := in.Zketcd().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestClientCertificateIdentityIsForwardedOnlyOverMutualTLS: under
// --client-cert-auth a user known by its certificate's common name writes
// through a follower; with mutual TLS between the instances the leader
// takes that name from the follower and commits the forwarded write;
// without it, the name is not taken, and the follower commits the write
// itself after checking it (nothing is forwarded on a claim the leader
// cannot verify).
func TestClientCertificateIdentityIsForwardedOnlyOverMutualTLS(t *testing.T) {
	zk := zkservertest.Standalone(t).Addr()
	for _, mutual := range []bool{true, false} {
		certs := testcerts.New(t)
		configure := func(cn string) func(*embed.Config) {
			return func(c *embed.Config) {
				c.GRPC.Auth.BcryptCost = bcrypt.MinCost
				if mutual {
					cert, key := certs.Peer(t, cn, "127.0.0.1")
					c.Peer = embed.PeerTLS{CertFile: cert, KeyFile: key, TrustedCAFile: certs.CAFile, ClientCertAuth: true}
				}
			}
		}
		leader := embedtest.Start(t, []string{zk}, embedtest.Options{ForwardWrites: true, TLS: certs.ServerTLS(t), SessionTimeout: 4 * time.Second,
			Configure: configure("zketcd-a")})
		waitLeader(t, leader)
		follower := embedtest.Start(t, []string{zk}, embedtest.Options{Root: leader.Root(), ForwardWrites: true, TLS: certs.ServerTLS(t),
			SessionTimeout: 4 * time.Second, Configure: configure("zketcd-b")})
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{follower.Endpoint()}, TLS: certs.ClientTLS(t, true), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// testcerts' client certificate has the common name "client".
		for _, step := range []func() error{
			func() error { _, err := c.UserAdd(ctx, "root", "rootpw"); return err },
			func() error { _, err := c.RoleAdd(ctx, "root"); return err },
			func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
			func() error { _, err := c.UserAdd(ctx, "client", "clientpw"); return err },
			func() error { _, err := c.UserGrantRole(ctx, "client", "root"); return err },
			func() error { _, err := c.AuthEnable(ctx); return err },
		} {
			if err := step(); err != nil {
				t.Fatal(err)
			}
		}
		labels := map[string]string{"method": "put"}
		ok := func() float64 {
			labels["outcome"] = "ok"
			return counter(t, follower, "zketcd_forward_requests_total", labels)
		}
		local := func() float64 {
			labels["outcome"] = "local"
			return counter(t, follower, "zketcd_forward_requests_total", labels)
		}
		ok0, local0 := ok(), local()
		if _, err := c.Put(ctx, "by-certificate", "v"); err != nil {
			t.Fatalf("mutual TLS %v: the certificate's user writes through the follower: %v", mutual, err)
		}
		forwarded, committedHere := ok()-ok0, local()-local0
		t.Logf("mutual TLS %v: forwarded %v, committed by the follower %v", mutual, forwarded, committedHere)
		if mutual && (forwarded != 1 || committedHere != 0) {
			t.Errorf("with mutual TLS: forwarded %v, committed by the follower %v; want it forwarded", forwarded, committedHere)
		}
		if !mutual && (forwarded != 0 || committedHere != 1) {
			t.Errorf("without mutual TLS: forwarded %v, committed by the follower %v; want the follower to commit it", forwarded, committedHere)
		}
	}
}

// TestForwardedSimpleTokenIdlePastItsTTLIsRefused: a simple token idle for
// longer than --auth-token-ttl is refused on the client API, and also when
// a holder of the internal endpoint (its token, and a peer certificate
// under mutual TLS) forwards a write with it to the leader; a token kept
// alive by use through a follower for longer than its TTL since it was
// issued still has its writes forwarded and committed by the leader.
func TestForwardedSimpleTokenIdlePastItsTTLIsRefused(t *testing.T) {
	zk := zkservertest.Standalone(t).Addr()
	const ttl = 2 * time.Second
	certs := testcerts.New(t)
	for _, mutual := range []bool{false, true} {
		configure := func(cn string) func(*embed.Config) {
			return func(c *embed.Config) {
				c.GRPC.Auth.BcryptCost = bcrypt.MinCost
				tp, err := auth.NewTokenProvider("simple", ttl)
				if err != nil {
					t.Fatal(err)
				}
				c.GRPC.Auth.Tokens = tp
				if mutual {
					cert, key := certs.Peer(t, cn, "127.0.0.1")
					c.Peer = embed.PeerTLS{CertFile: cert, KeyFile: key, TrustedCAFile: certs.CAFile, ClientCertAuth: true}
				}
			}
		}
		leader := forwardingLeader(t, zk, configure("zketcd-a"))
		follower := embedtest.Start(t, []string{zk}, embedtest.Options{Root: leader.Root(), ForwardWrites: true, SessionTimeout: 4 * time.Second,
			Configure: configure("zketcd-b")})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		enableAuth(t, follower.Client(t))
		_, tok := login(t, ctx, follower.Endpoint(), "root", "rootpw")
		kv := pb.NewKVClient(rawConn(t, follower.Endpoint()))
		withTok := metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, tok)

		// Kept alive by reads through the follower past its TTL since
		// issue, then a write: forwarded, and committed by the leader.
		for end := time.Now().Add(ttl + time.Second); time.Now().Before(end); time.Sleep(ttl / 4) {
			if _, err := kv.Range(withTok, &pb.RangeRequest{Key: []byte("k")}); err != nil {
				t.Fatalf("mutual TLS %v: a read with a token in use: %v", mutual, err)
			}
		}
		forwarded := map[string]string{"method": "put", "outcome": "ok"}
		before := counter(t, follower, "zketcd_forward_requests_total", forwarded)
		if _, err := kv.Put(withTok, &pb.PutRequest{Key: []byte("alive"), Value: []byte("v")}); err != nil {
			t.Fatalf("mutual TLS %v: a write with a token kept alive: %v", mutual, err)
		}
		if n := counter(t, follower, "zketcd_forward_requests_total", forwarded) - before; n != 1 {
			t.Fatalf("mutual TLS %v: the write with a token kept alive was forwarded %v times, want once (not committed by the follower itself)", mutual, n)
		}

		time.Sleep(ttl + time.Second) // idle past its TTL
		if _, err := kv.Put(withTok, &pb.PutRequest{Key: []byte("idle"), Value: []byte("v")}); !errors.Is(rpctypes.Error(err), rpctypes.ErrInvalidAuthToken) {
			t.Fatalf("mutual TLS %v: the client API took an idle token: %v", mutual, err)
		}
		scheme, peerTLS := "http://", (*tls.Config)(nil)
		if mutual {
			cert, key := certs.Peer(t, "zketcd-c", "127.0.0.1")
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				t.Fatal(err)
			}
			scheme, peerTLS = "https://", &tls.Config{RootCAs: certs.CA, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
		}
		err := newAttacker(t, leader, scheme, peerTLS).send(ctx, auth.Caller{Token: tok}, &pb.PutRequest{Key: []byte("forged"), Value: []byte("v")}, nil)
		if err == nil {
			t.Errorf("mutual TLS %v: the leader took a forwarded write with a token idle past its TTL", mutual)
		}
		rootC, _ := login(t, ctx, follower.Endpoint(), "root", "rootpw")
		if resp, err := rootC.Get(ctx, "forged"); err != nil || len(resp.Kvs) != 0 {
			t.Errorf("mutual TLS %v: the forged write: %v %v, want nothing stored", mutual, resp, err)
		}
	}
}

// sendAs forwards req on behalf of caller under tag, as send does.
func (a *attacker) sendAs(ctx context.Context, caller auth.Caller, req proto.Message, tag revision.WriterTag) error {
	k, ok := engine.WriteKindOf(req)
	if !ok {
		return errors.New("not forwardable")
	}
	state, _ := a.in.Engine().AuthState()
	var fp uint64
	if len(state) > 0 {
		fp = crc64.Checksum(state, crc64.MakeTable(crc64.ECMA)) | 1
	}
	_, err := a.c.Forward(auth.WithCaller(ctx, caller), a.peer, engine.ForwardCall{
		Origin: tag, AuthFP: fp, Req: req, Resp: k.NewResponse(), Fresh: true,
	})
	return err
}

// logOf reads the log of root, in log order, as a ZooKeeper session without any identity
// reads an open root (or as whoever holds the identity, or a backup).
func logOf(t *testing.T, zkAddr, root string) []*revision.Entry {
	t.Helper()
	conn, _, err := zkclient.Connect([]string{zkAddr}, 5*time.Second, zkclient.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buckets, _, err := conn.Children(root + "/log")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(buckets) // names are zero-padded positions
	var out []*revision.Entry
	for _, bucket := range buckets {
		entries, _, err := conn.Children(root + "/log/" + bucket)
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(entries)
		for _, name := range entries {
			data, _, err := conn.Get(root + "/log/" + bucket + "/" + name)
			if err != nil {
				t.Fatal(err)
			}
			e, err := zkstore.DecodeEntry(data)
			if err != nil {
				t.Fatalf("entry %s: %v", name, err)
			}
			out = append(out, e)
		}
	}
	return out
}

// originNonce returns the nonce of the forwarded requests in root's log
// (logOf): the follower's, whose tags count their sequence from 1.
func originNonce(t *testing.T, zkAddr, root string) uint64 {
	t.Helper()
	for _, e := range logOf(t, zkAddr, root) {
		for _, op := range e.Ops {
			if op.Kind == revision.OpOrigin {
				return op.Origin.Nonce
			}
		}
	}
	t.Fatal("no forwarded request in the log")
	return 0
}

// TestForgedForwardsUnderAFollowersNextTagsDoNotAnswerItsWrites: a holder
// of the leader's internal token reads the follower's nonce in ZooKeeper's
// data and forwards its own requests under the follower's next tags (a
// sequence counted from 1: it sends under the first 40), before the
// follower sends its own: an alarm activation (accepted without any
// credential), or puts of its own with alice's credential. Each request of
// root's through the follower under those tags must still be committed
// and answered with its own response: a tag answers only the same request
// of the same caller.
func TestForgedForwardsUnderAFollowersNextTagsDoNotAnswerItsWrites(t *testing.T) {
	zk := zkservertest.Standalone(t).Addr()
	for _, tc := range []struct {
		name   string
		caller func(aliceTok string) auth.Caller
		forged func(follower *embedtest.Instance, i int) proto.Message
	}{
		{"an alarm, without a credential", func(string) auth.Caller { return auth.Caller{} },
			func(f *embedtest.Instance, _ int) proto.Message {
				return &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: f.Engine().MemberID(), Alarm: pb.AlarmType_NONE}
			}},
		{"alice's own puts", func(tok string) auth.Caller { return auth.Caller{Token: tok} },
			func(_ *embedtest.Instance, i int) proto.Message {
				return &pb.PutRequest{Key: []byte("/bar"), Value: []byte(fmt.Sprintf("mallory-%d", i))}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader := forwardingLeader(t, zk, nil)
			follower := embedtest.Start(t, []string{zk}, embedtest.Options{Root: leader.Root(), ForwardWrites: true, SessionTimeout: 4 * time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			enableAuth(t, follower.Client(t))
			rootC, _ := login(t, ctx, follower.Endpoint(), "root", "rootpw")
			_, aliceTok := login(t, ctx, follower.Endpoint(), "alice", "alicepw")
			if _, err := rootC.Put(ctx, "warm", "1"); err != nil {
				t.Fatal(err)
			}
			nonce := originNonce(t, zk, leader.Root())
			a := newAttacker(t, leader, "http://", nil)
			for seq := uint64(1); seq <= 40; seq++ {
				tag := revision.WriterTag{Nonce: nonce, Seq: seq}
				if err := a.sendAs(ctx, tc.caller(aliceTok), tc.forged(follower, int(seq)), tag); err != nil {
					t.Fatalf("the forged request under the follower's tag %d (accepted for what it is): %v", seq, err)
				}
			}
			const n = 5
			for i := 1; i <= n; i++ {
				key := fmt.Sprintf("root-%d", i)
				resp, err := rootC.Put(ctx, key, "v")
				if err != nil {
					t.Fatalf("root's put %d through the follower: %v", i, err)
				}
				if resp.Header == nil || resp.Header.Revision == 0 {
					t.Fatalf("root's put %d answered %v", i, resp)
				}
				got, err := rootC.Get(ctx, key)
				if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != resp.Header.Revision {
					t.Fatalf("root's put %d answered OK at revision %d; stored: %v %v", i, resp.Header.Revision, got, err)
				}
			}
			if err := follower.Engine().Health(); err != nil {
				t.Fatalf("the follower after the attack: %v", err)
			}
		})
	}
}

// readIndexCall is the engine's ReadIndex call of the internal endpoint.
func readIndexCall() engine.CallKind {
	for _, k := range engine.CallKinds() {
		if k.Method == "ReadIndex" {
			return k
		}
	}
	panic("no ReadIndex call")
}
