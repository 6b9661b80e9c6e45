package zkstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestARootAMirrorCopiesIntoIsServedOnlyOnceFinished: ClaimMirror takes a
// fresh root (or returns the record of one claimed before, for a resume);
// every Open but the mirror's refuses the root, naming the mirror, until
// FinishMirror; a finish after another writer moved the head fails; a
// root with content and no record is not claimed.
func TestARootAMirrorCopiesIntoIsServedOnlyOnceFinished(t *testing.T) {
	srv := zkservertest.Standalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := Config{Servers: []string{srv.Addr()}, Root: "/fleet/roots/t1", Logger: quietLogger()}
	rec := MirrorRecord{SourceClusterID: 42, Source: "http://127.0.0.1:1", Prefix: []byte("/t1/"), Started: time.Now().UTC()}
	got, created, err := ClaimMirror(ctx, cfg, rec)
	if err != nil || !created || got.State != MirrorCopying {
		t.Fatalf("claim: %+v %v %v", got, created, err)
	}
	again, created, err := ClaimMirror(ctx, cfg, MirrorRecord{SourceClusterID: 7})
	if err != nil || created || !again.Same(rec) {
		t.Fatalf("claim again: %+v %v %v", again, created, err)
	}
	if _, err := openStore(t, cfg); !errors.Is(err, ErrMirrorInProgress) {
		t.Fatalf("an instance opened a root a mirror copies into: %v", err)
	}
	mcfg := cfg
	mcfg.Mirror = true
	m, err := openStore(t, mcfg)
	if err != nil {
		t.Fatal(err)
	}
	if m.Format() < GapsMetaFormat {
		t.Fatalf("a mirror's new root has format %d", m.Format())
	}
	r, ok, err := m.MirrorRecord()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	head, err := m.Head()
	if err != nil {
		t.Fatal(err)
	}
	stale := head
	stale.LSN = 0
	if _, err := m.FinishMirror(r, stale, 9); err == nil {
		t.Fatal("finished a mirror whose head moved")
	}
	if _, err := m.FinishMirror(r, head, 9); err != nil {
		t.Fatal(err)
	}
	if r, _, _ = m.MirrorRecord(); r.State != MirrorFinished || r.FinishedRev != 9 {
		t.Fatalf("record after finish: %+v", r)
	}
	if _, err := openStore(t, cfg); err != nil {
		t.Fatalf("open after the cut-over: %v", err)
	}
	other := cfg
	other.Root = "/fleet/roots/t2"
	if _, err := openStore(t, other); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ClaimMirror(ctx, other, rec); !errors.Is(err, ErrNotFresh) {
		t.Fatalf("claimed a root with content: %v", err)
	}
	// Emptied (a mirror starting its initial copy over), it is claimed
	// again: its znode has had children, so its child version moved.
	if err := DeleteRoot(ctx, other, true); err != nil {
		t.Fatal(err)
	}
	if _, created, err := ClaimMirror(ctx, other, rec); err != nil || !created {
		t.Fatalf("claim of an emptied root: %v %v", created, err)
	}
}
