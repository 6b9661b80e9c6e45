package embed_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

func TestClientTLSRequiresACertificateFromTheCA(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	certs := testcerts.New(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{TLS: certs.ServerTLS(t)})
	dial := func(withCert bool) error {
		c, err := clientv3.New(clientv3.Config{
			Endpoints: []string{in.Endpoint()}, DialTimeout: 3 * time.Second,
			TLS: certs.ClientTLS(t, withCert), Logger: zap.NewNop(),
		})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = c.Put(ctx, "k", "v")
		return err
	}
	if err := dial(true); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if err := dial(false); err == nil {
		t.Fatal("a client without a certificate was served")
	}
}

func TestZooKeeperACLKeepsOthersOut(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{ZKAuth: []string{"digest:zketcd:s3cret"}})
	c := in.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "secret", "value"); err != nil {
		t.Fatal(err)
	}
	anon, _, err := zk.Connect([]string{zkSrv.Addr()}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	for _, p := range []string{in.Root() + "/meta", in.Root() + "/head", in.Root() + "/log"} {
		if _, _, err := anon.Get(p); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("anonymous read of %s: %v, want no auth", p, err)
		}
		if _, err := anon.Set(p, []byte("x"), -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("anonymous write of %s: %v, want no auth", p, err)
		}
	}
	if _, err := anon.Create(in.Root()+"/log/intruder", nil, 0, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("anonymous create under the root: %v", err)
	}
	// Another instance with the wrong password cannot open the root.
	_, err = startExpectingFailure(t, zkSrv.Addr(), in.Root(), "digest:zketcd:wrong")
	if err == nil || !strings.Contains(err.Error(), "ACLed to another identity") {
		t.Fatalf("instance with a wrong password: %v", err)
	}
}

// TestZooKeeperTLS runs zketcd against ZooKeeper's secure client port with
// a client certificate ZooKeeper requires.
func TestZooKeeperTLS(t *testing.T) {
	certs := testcerts.New(t)
	opts, addr := zkservertest.SecureOptions(t, certs)
	zkservertest.StandaloneWith(t, opts)
	secure := []string{addr}
	in := embedtest.Start(t, secure, embedtest.Options{ZKTLS: certs.ClientTLS(t, true)})
	c := in.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "over", "tls"); err != nil {
		t.Fatal(err)
	}
	if resp, err := c.Get(ctx, "over"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get over TLS: %v %v", resp, err)
	}
}

// TestForeignDataUnderTheRootIsReportedNotServed: data zketcd did not
// write (or that was corrupted) makes recovery fail with an error naming
// the znode, never a panic or a silent skip.
func TestForeignDataUnderTheRootIsReportedNotServed(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{})
	c := in.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	in.Close()
	raw, _, err := zk.Connect([]string{zkSrv.Addr()}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	entry := in.Root() + "/log/0000000000/00000000000000000002"
	if _, err := raw.Set(entry, []byte("not a zketcd entry"), -1); err != nil {
		t.Fatal(err)
	}
	_, err = startExpectingFailure(t, zkSrv.Addr(), in.Root(), "")
	if err == nil || !strings.Contains(err.Error(), entry) {
		t.Fatalf("recovery over a corrupted entry: %v (want an error naming %s)", err, entry)
	}
	if _, err := raw.Set(in.Root()+"/meta", []byte("{not json"), -1); err != nil {
		t.Fatal(err)
	}
	_, err = startExpectingFailure(t, zkSrv.Addr(), in.Root(), "")
	if err == nil || !strings.Contains(err.Error(), in.Root()+"/meta") {
		t.Fatalf("corrupted meta: %v", err)
	}
}
