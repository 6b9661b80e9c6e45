package backend_test

import (
	"bytes"
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/auth"
	"github.com/zketcd/zketcd/internal/zketcdtest"
)

func TestAuthWriteIsInTheLogAndAuthChecksSeeTheBatchState(t *testing.T) {
	in := zketcdtest.Start(t, []string{zkAddr(t)}, zketcdtest.Options{})
	be := in.Backend()
	ctx := ctxT(t)
	rev := be.State().Rev
	if _, err := be.AuthWrite(ctx, &pb.AuthRoleAddRequest{Name: "x"}, func(cur []byte) ([]byte, any, error) {
		return []byte("state-1"), &pb.AuthRoleAddResponse{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, _ := be.AuthState(); string(got) != "state-1" || be.State().Rev != rev {
		t.Fatalf("auth state %q at rev %d; want state-1 at rev %d (auth takes no revision)", got, be.State().Rev, rev)
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
	if !bytes.Equal(seen, []byte("state-1")) {
		t.Fatalf("check saw %q", seen)
	}
	ok := auth.WithCheck(ctx, func([]byte) error { return nil })
	if _, err := be.Put(ok, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	in.Restart()
	if got, _ := in.Backend().AuthState(); string(got) != "state-1" {
		t.Fatalf("after restart: %q", got)
	}
}
