package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/mirror"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/testutil/rootview"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// errMoverCrash stops a cut-over at a chosen entry, as the mover's crash
// there would: what it committed stays, nothing after it happens.
var errMoverCrash = errors.New("the mover crashed here")

// moveFixture is one etcd 3.7.3 holding two clusters under two prefixes,
// and a root to move prefixA into.
type moveFixture struct {
	src   *etcdoracle.Oracle
	ec    *clientv3.Client
	w     *sharedWriter
	store zkstore.Config
}

func newMoveFixture(t *testing.T, servers []string) *moveFixture {
	src := etcdoracle.Start(t)
	f := &moveFixture{src: src, ec: src.Client(t)}
	f.w = newSharedWriter(t, f.ec)
	f.store = zkstore.Config{Servers: servers, Root: freshRoot(t), Logger: testutil.Logger(logrus.WarnLevel)}
	return f
}

func (f *moveFixture) config(t *testing.T) mirror.Config {
	return mirror.Config{Source: etcdoracle.NewClient(t, f.src.Endpoint()), SourceURLs: f.src.Endpoint(), Prefix: []byte(prefixA),
		Store: f.store, StatusInterval: 100 * time.Millisecond, Quiet: 300 * time.Millisecond, PageSize: 7}
}

// writes takes n steps of the shared writer, then puts a few keys of the
// other cluster, so that the source's revision is past the copied
// cluster's last change (a cut-over then moves the root over a gap).
func (f *moveFixture) writes(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	for range n {
		f.w.step(ctx)
	}
	for i := range 3 {
		if _, err := f.ec.Put(ctx, fmt.Sprintf("%sregistry/late/%d", prefixB, i), fmt.Sprint(f.w.n)); err != nil {
			t.Fatal(err)
		}
	}
}

// mirrorWhile runs the prefix mirror while the writer takes steps, calls
// during (if not nil) when a third of them are taken and again with
// false at two thirds, and stops the mirror after the last one. The
// mirror must not stop by itself.
func (f *moveFixture) mirrorWhile(t *testing.T, ctx context.Context, steps int, during func(first bool)) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	var following atomic.Bool
	go func() {
		done <- mirror.Run(rctx, f.config(t), func(s mirror.Status) {
			if s.SourceRev > 0 && !s.Initial {
				following.Store(true)
			}
		})
	}()
	testutil.Eventually(t, time.Minute, "the mirror follows the source", following.Load)
	for i := range steps {
		if during != nil && (i == steps/3 || i == 2*steps/3) {
			during(i == steps/3)
		}
		f.w.step(ctx)
		select {
		case err := <-done:
			t.Fatalf("the mirror stopped by itself after write %d: %v", i, err)
		default:
		}
	}
	stopRun(t, done, cancel)
}

// checkMoved checks a finished cut-over against the source: at the
// source's revision, equal hashes; every revision that changed the copied
// cluster after the initial copy once in the root, none lost; the keys
// with their revisions and versions served by an instance on the root at
// the source's revision; a cut-over run again says plainly that the root
// was cut over, at which revision.
func (f *moveFixture) checkMoved(t *testing.T, ctx context.Context, res mirror.Result) {
	t.Helper()
	head, err := f.ec.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	srcRev := head.Header.Revision
	if res.Rev != srcRev || res.SourceHash != res.RootHash || res.Keys == 0 {
		t.Fatalf("cut-over %+v, want the source's revision %d and equal hashes", res, srcRev)
	}
	snap := rootview.Recovered(t, f.store) // a revision copied twice would not replay
	changed := map[int64]bool{}
	snap.Each(func(kh revision.KeyHistory) bool {
		for _, kv := range kh.Versions {
			if kv.ModRevision > snap.State.CompactRev {
				changed[kv.ModRevision] = true
			}
		}
		return true
	})
	n := 0
	for _, r := range f.w.revA {
		if r > snap.State.CompactRev {
			n++
			if !changed[r] {
				t.Errorf("revision %d changed the copied cluster at the source; the root has no change at it", r)
			}
		}
	}
	if n != len(changed) || n == 0 {
		t.Errorf("the root changed %d revisions after its initial copy at %d, the source %d", len(changed), snap.State.CompactRev, n)
	}
	_, err = mirror.Cutover(ctx, f.config(t), nil)
	if want := fmt.Sprintf("cut over at revision %d", srcRev); !errors.Is(err, mirror.ErrNotResumable) || !strings.Contains(err.Error(), want) {
		t.Errorf("a cut-over run again: %v, want %v saying %q", err, mirror.ErrNotResumable, want)
	}
	zk := embedtest.Start(t, f.store.Servers, embedtest.Options{Root: f.store.Root})
	gotKeys, hdr := prefixDump(t, zk.Client(t), prefixA, 0)
	wantKeys, _ := prefixDump(t, f.ec, prefixA, 0)
	if gotKeys != wantKeys || hdr != srcRev {
		t.Fatalf("keys on zketcd at header %d (source at %d):\n%s\nsource:\n%s", hdr, srcRev, gotKeys, wantKeys)
	}
	t.Logf("cut over at revision %d: %d keys, %d leases, hash %08x; %d revisions of the cluster after the initial copy at %d",
		res.Rev, res.Keys, res.Leases, res.RootHash, n, snap.State.CompactRev)
}

// killZKLeader kills the ensemble's leader (SIGKILL) and returns what
// starts it again.
func killZKLeader(t *testing.T, ens *zkserver.Ensemble) (restart func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var li int
	for {
		var err error
		if li, err = ens.Leader(ctx); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no ZooKeeper leader: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	m := ens.Member(li)
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kill -9 ZooKeeper leader (member %d)", li+1)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := m.Start(ctx); err != nil {
			t.Fatalf("restart ZooKeeper member %d: %v", li+1, err)
		}
		if err := ens.WaitQuorum(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// The entries of a cut-over a fault is injected after.
var (
	// tailEntry: the first change the cut-over copies.
	tailEntry = func(e *revision.Entry) bool {
		for _, op := range e.Ops {
			if op.Kind == revision.OpTxn {
				return true
			}
		}
		return false
	}
	// bumpEntry: the entry moving the root to the source's revision, the
	// last before the hashes are compared and the mirror finished.
	bumpEntry = func(e *revision.Entry) bool { return len(e.Ops) == 1 && e.Ops[0].Kind == revision.OpBumpRev }
)

// TestPrefixMoveSurvivesFaults: a prefix mirror and its cut-over on a
// 3-member ZooKeeper ensemble, with the ZooKeeper leader killed while the
// mirror copies under writes to both clusters of the source, while the
// cut-over copies the tail and between the cut-over's move of the
// revision and its finish, and with the mover crashing at those two
// points of the cut-over and the cut-over run again. The mirror and the
// cut-over ride through a member's loss; a crashed cut-over leaves the
// root unserved and the next one finishes it at the source's revision.
// Every case ends with no revision of the copied cluster lost or copied
// twice, equal hashes, the keys served at the source's revision, and a
// third cut-over that says the root was cut over.
func TestPrefixMoveSurvivesFaults(t *testing.T) {
	zkservertest.SkipShort(t)
	ens := zkservertest.Ensemble(t, 3)
	t.Run("ZKLeaderKilledWhileMirroring", func(t *testing.T) {
		ctx := testutil.Context(t, 4*time.Minute)
		f := newMoveFixture(t, ens.Addrs())
		f.writes(t, ctx, 30)
		var restart func()
		f.mirrorWhile(t, ctx, 150, func(first bool) {
			if first {
				restart = killZKLeader(t, ens)
			} else {
				restart()
			}
		})
		f.writes(t, ctx, 30)
		res, err := mirror.Cutover(ctx, f.config(t), nil)
		if err != nil {
			t.Fatalf("cut-over: %v", err)
		}
		f.checkMoved(t, ctx, res)
	})
	for _, tc := range []struct {
		name  string
		at    func(*revision.Entry) bool
		crash bool // the mover stops there; else the ZooKeeper leader is killed there
	}{
		{"ZKLeaderKilledWhileCopyingTheTail", tailEntry, false},
		{"ZKLeaderKilledBetweenTheBumpAndTheFinish", bumpEntry, false},
		{"MoverCrashWhileCopyingTheTail", tailEntry, true},
		{"MoverCrashBetweenTheBumpAndTheFinish", bumpEntry, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testutil.Context(t, 4*time.Minute)
			f := newMoveFixture(t, ens.Addrs())
			f.writes(t, ctx, 30)
			f.mirrorWhile(t, ctx, 60, nil)
			f.writes(t, ctx, 60) // the tail the cut-over copies
			fired := false
			cfg := f.config(t)
			cfg.AfterCommit = func(e *revision.Entry) error {
				if fired || !tc.at(e) {
					return nil
				}
				fired = true
				if tc.crash {
					return errMoverCrash
				}
				t.Cleanup(killZKLeader(t, ens))
				return nil
			}
			res, err := mirror.Cutover(ctx, cfg, nil)
			if !fired {
				t.Fatalf("the cut-over (%v) committed no entry to inject the fault after", err)
			}
			if tc.crash {
				if !errors.Is(err, errMoverCrash) {
					t.Fatalf("cut-over: %v, want the crash", err)
				}
				if st, err := zkstore.Open(ctx, f.store); !errors.Is(err, zkstore.ErrMirrorInProgress) {
					if err == nil {
						st.Close()
					}
					t.Fatalf("open the root after a crashed cut-over: %v, want %v", err, zkstore.ErrMirrorInProgress)
				}
				res, err = mirror.Cutover(ctx, f.config(t), nil)
			}
			if err != nil {
				t.Fatalf("cut-over: %v", err)
			}
			f.checkMoved(t, ctx, res)
		})
	}
}
