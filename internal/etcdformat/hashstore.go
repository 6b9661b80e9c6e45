package etcdformat

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/zketcd/zketcd/internal/revision"
)

// storedHashes is how many compaction hashes a HashStore keeps (etcd's).
const storedHashes = 10

// HashStore keeps the hashes of the last ten compactions a view applied, as
// etcd's hash storage does, so that HashKV at a compaction's revision
// answers what etcd answers there. It is safe for concurrent use; the zero
// value is ready.
//
// It computes one compaction's hash at a time, as etcd, whose compactions
// run one after another, and stores a compaction's hash only if the one
// before it had finished when it was asked for (etcd's mvcc store checks
// that the previous scheduled compaction is the finished one, and skips
// storing the hash otherwise: it would not cover every revision since that
// compaction). A compaction applied while a hash is still being computed
// gets none: HashKV at its revision is then computed from the store as it
// is, as etcd answers a revision it stored no hash for. So however often a
// client compacts, at most one copy of the view is held for a hash.
type HashStore struct {
	mu     sync.Mutex
	hashes []*storedHash // ascending by revision
	busy   bool          // a compaction's hash is being computed

	// slice and pace, if set, replace hashSlice and halfDuty (tests).
	slice int
	pace  func() func()
}

type storedHash struct {
	rev  int64
	done chan struct{}
	h    KVHash
	err  error
}

// hashSlice is how many keys, then records, a compaction's hash reads
// between two pauses (~5 ms of work on the benchmark's host).
const hashSlice = 4096

// halfDuty returns a pace function that sleeps for as long as the work
// since its last call took: a compaction's hash, which has no deadline,
// takes at most half of a core, and the requests served meanwhile (and the
// ZooKeeper servers beside the instance) the rest. It doubles the hash's
// time, and so how long its copy of the view is held.
func halfDuty() func() {
	last := time.Now()
	return func() {
		time.Sleep(time.Since(last))
		last = time.Now()
	}
}

// Compacted is a compaction observer (engine.Engine.OnCompact): it computes
// the compaction's hash (CompactionHash) in the background from the copy
// before, keeps it with the newest nine others, and then, holding before no
// longer, calls dropped (if not nil) from the goroutine that computed it.
// While the hash of an earlier compaction is still being computed it keeps
// nothing for this one and calls dropped at once (see HashStore). It
// returns at once.
func (hs *HashStore) Compacted(before *revision.Snapshot, rev int64, dropped func()) {
	hs.mu.Lock()
	if hs.busy {
		hs.mu.Unlock()
		if dropped != nil {
			dropped()
		}
		return
	}
	hs.busy = true
	sh := &storedHash{rev: rev, done: make(chan struct{})}
	hs.hashes = append(hs.hashes, sh)
	sort.SliceStable(hs.hashes, func(i, j int) bool { return hs.hashes[i].rev < hs.hashes[j].rev })
	if len(hs.hashes) > storedHashes {
		hs.hashes = append([]*storedHash(nil), hs.hashes[len(hs.hashes)-storedHashes:]...)
	}
	slice, pace := hashSlice, halfDuty
	if hs.slice > 0 {
		slice = hs.slice
	}
	if hs.pace != nil {
		pace = hs.pace
	}
	hs.mu.Unlock()
	go func() {
		sh.h, sh.err = pacedCompactionHash(before, rev, slice, pace())
		before = nil // the versions the compaction removed go with it
		hs.mu.Lock()
		hs.busy = false // before done: whoever waited for it sees the next one taken
		hs.mu.Unlock()
		close(sh.done)
		if dropped != nil {
			dropped()
		}
	}()
}

// Lookup returns the stored hash of the compaction to rev, waiting for it
// if it is still being computed; ok is false if there is none (a request
// for revision 0 matches a compaction to 0, as in etcd). Errors: ctx's.
func (hs *HashStore) Lookup(ctx context.Context, rev int64) (h KVHash, ok bool, err error) {
	hs.mu.Lock()
	var found *storedHash
	for _, sh := range hs.hashes {
		if sh.rev == rev {
			found = sh
		}
	}
	hs.mu.Unlock()
	if found == nil {
		return KVHash{}, false, nil
	}
	select {
	case <-found.done:
	case <-ctx.Done():
		return KVHash{}, false, ctx.Err()
	}
	if found.err != nil {
		return KVHash{}, false, nil
	}
	return found.h, true, nil
}
