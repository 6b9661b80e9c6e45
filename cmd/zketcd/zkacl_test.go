package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

func parseZKACLFlags(t *testing.T, args ...string) (serveFlags, bool) {
	t.Helper()
	fs, f, check := zkACLFlags()
	fs.SetOutput(io.Discard)
	if err := fs.Parse(append([]string{"--log-level", "error"}, args...)); err != nil {
		t.Fatal(err)
	}
	return *f, *check
}

// TestZKACLCommandMovesARootBetweenIdentitiesWithProgress: zk-acl closes
// an open root to a digest identity, then moves it to another identity
// given the former one; --check reports what is not ACLed to the identity.
func TestZKACLCommandMovesARootBetweenIdentitiesWithProgress(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{Root: "/moved"})
	c := in.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 20 {
		if _, err := c.Put(ctx, "k"+strings.Repeat("x", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	in.Close()
	run := func(args ...string) (string, error) {
		f, check := parseZKACLFlags(t, append([]string{"--zk", zkSrv.Addr(), "--zk-root", "/moved"}, args...)...)
		var out bytes.Buffer
		err := zkACL(ctx, f, check, &out)
		return out.String(), err
	}
	out, err := run("--zk-auth", "digest:a:pw-a", "--check")
	if err == nil || !strings.Contains(out, "not ACLed to digest:a only") {
		t.Fatalf("--check on an open root: %v\n%s", err, out)
	}
	out, err = run("--zk-auth", "digest:a:pw-a")
	if err != nil || !strings.Contains(out, "set the ACL of") || !strings.Contains(out, ", 0 not ACLed") {
		t.Fatalf("zk-acl: %v\n%s", err, out)
	}
	anon, _, err := zk.Connect([]string{zkSrv.Addr()}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, _, err := anon.Get("/moved/log/0000000000/00000000000000000005"); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("an entry after zk-acl: %v, want no auth", err)
	}
	if _, err := run("--zk-auth", "digest:b:pw-b"); err == nil || !strings.Contains(err.Error(), "ACLed to") {
		t.Fatalf("moving without the former identity: %v", err)
	}
	if out, err = run("--zk-auth", "digest:b:pw-b", "--zk-former-auth", "digest:a:pw-a"); err != nil {
		t.Fatalf("moving with the former identity: %v\n%s", err, out)
	}
	if out, err := run("--zk-auth", "digest:b:pw-b", "--check"); err != nil {
		t.Fatalf("--check after the move: %v\n%s", err, out)
	}
	moved := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{Root: "/moved", ZKAuth: []string{"digest:b:pw-b"}})
	if r, err := moved.Client(t).Get(ctx, "k"); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the moved root serves: %v %v", r, err)
	}
}
