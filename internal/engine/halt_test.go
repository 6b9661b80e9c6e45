package engine

// Rollback detection on memlog: the log going back under a running
// engine (memlog.Store.RollBack, as a ZooKeeper restored from an older
// backup) halts it. The ZooKeeper-backed tests (rollback_test.go) prove the
// same on a real ensemble, with the refused session and the fresh-session
// probe that only ZooKeeper has.

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/lossfile"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/translate"
)

func TestLogGoingBackHaltsTheEngineRefusesEveryReadAndWritesTheLoss(t *testing.T) {
	st := memlog.New(memlog.Options{})
	dir := t.TempDir()
	b, _ := engine(t, st, "a", func(c *Config) { c.LossDir = dir })
	put(t, b, "a", "1")
	put(t, b, "b", "2") // revision 3
	fork := b.State()
	put(t, b, "c", "3")
	put(t, b, "d", "4") // revision 5
	if err := st.RollBack(fork.LSN); err != nil {
		t.Fatal(err)
	}

	var rbe *RollbackError
	testutil.Eventually(t, 10*time.Second, "the engine halts with the loss file named", func() bool {
		return errors.As(b.Health(), &rbe) && rbe.LossFile != ""
	})
	if !errors.Is(b.Health(), ErrRollback) || !errors.Is(b.Health(), ErrHalted) {
		t.Fatalf("health %v: want ErrRollback and ErrHalted", b.Health())
	}
	if rbe.Applied.Rev != 5 || rbe.ZooKeeper.Rev != 3 || rbe.Fork.Rev != 3 {
		t.Fatalf("applied %d, zookeeper %d, fork %d: want 5, 3, 3", rbe.Applied.Rev, rbe.ZooKeeper.Rev, rbe.Fork.Rev)
	}
	select {
	case <-b.Halted():
	default:
		t.Fatal("Halted() not closed (grpcsrv learns of the halt by it)")
	}

	f, err := os.Open(rbe.LossFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, recs, err := lossfile.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if h.ForkRev != 3 || h.AppliedRev != 5 || len(recs) != 2 ||
		string(recs[0].Key) != "c" || recs[0].Rev != 4 || string(recs[1].Key) != "d" || recs[1].Rev != 5 {
		t.Fatalf("loss file: header %+v, records %+v: want the puts of c (4) and d (5) after fork 3", h, recs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, call := range map[string]func() error{
		"serializable range": func() error {
			_, err := b.Range(ctx, &pb.RangeRequest{Key: []byte("a"), Serializable: true})
			return err
		},
		"linearizable range": func() error { _, err := b.Range(ctx, &pb.RangeRequest{Key: []byte("a")}); return err },
		"read":               func() error { return b.Read(func(revision.Reader) error { return nil }) },
		// grpcsrv drives RangeStream through translate over Read.
		"serializable range stream": func() error {
			req := &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), Serializable: true}
			return translate.RangeStream(ctx, req, 1<<20, b.Read, func(*pb.RangeResponse) error { return nil })
		},
		"linearize": func() error { return b.Linearize(ctx) },
		"put":       func() error { _, err := b.Put(ctx, &pb.PutRequest{Key: []byte("e"), Value: []byte("5")}); return err },
		"txn": func() error {
			_, err := b.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Serializable: true}}}}})
			return err
		},
		"compact": func() error { _, err := b.Compact(ctx, &pb.CompactionRequest{Revision: 2}); return err },
	} {
		if err := call(); !errors.Is(err, rpctypes.ErrGRPCCorrupt) {
			t.Errorf("%s on a halted engine: %v, want %v", name, err, rpctypes.ErrGRPCCorrupt)
		}
	}

	// Another history at the reused positions is never applied.
	st.AppendForeign([]revision.Op{{Kind: revision.OpTxn, Rev: 4, Changes: []revision.Change{{Key: []byte("x"), Value: []byte("other")}}}})
	// A negative: nothing is applied for a bounded while (the tailer of a
	// running engine applies a foreign entry within milliseconds).
	time.Sleep(300 * time.Millisecond)
	if got := b.State(); got.Rev != 5 || got.LSN != rbe.Applied.LSN {
		t.Fatalf("halted engine moved to %+v", got)
	}
}
