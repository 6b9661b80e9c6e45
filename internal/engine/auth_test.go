package engine_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/testutil"
)

func TestAuthWriteIsInTheLogAndAuthChecksSeeTheBatchState(t *testing.T) {
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{})
	be := in.Engine()
	ctx := testutil.Context(t, 30*time.Second)
	rev := be.State().Rev
	resp, err := be.AuthWrite(ctx, &pb.AuthRoleAddRequest{Name: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := resp.(*pb.AuthRoleAddResponse); !ok {
		t.Fatalf("response %T, want *AuthRoleAddResponse", resp)
	}
	state1, _ := be.AuthState()
	if st, err := auth.Decode(state1); err != nil || st.Role("x") == nil || be.State().Rev != rev {
		t.Fatalf("auth state %v (%v) at rev %d; want role x at rev %d (auth takes no revision)", st, err, be.State().Rev, rev)
	}
	// A write whose check refuses the staged state fails with its error,
	// and one whose check accepts it commits.
	refused := errors.New("refused")
	var seen []byte
	checked := auth.WithCheck(ctx, func(state []byte) error {
		seen = state
		return refused
	})
	if _, err := be.Put(checked, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); !errors.Is(err, refused) {
		t.Fatalf("put with a refusing check: %v", err)
	}
	if !bytes.Equal(seen, state1) {
		t.Fatalf("check saw %q", seen)
	}
	ok := auth.WithCheck(ctx, func([]byte) error { return nil })
	if _, err := be.Put(ok, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	in.Restart()
	if got, _ := in.Engine().AuthState(); !bytes.Equal(got, state1) {
		t.Fatalf("after restart: %q", got)
	}
}
