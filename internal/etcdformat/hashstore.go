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
// answers what etcd answers there. It is safe for concurrent use.
type HashStore struct {
	mu     sync.Mutex
	hashes []*storedHash // ascending by revision
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
// It returns at once.
func (hs *HashStore) Compacted(before *revision.Snapshot, rev int64, dropped func()) {
	sh := &storedHash{rev: rev, done: make(chan struct{})}
	hs.mu.Lock()
	hs.hashes = append(hs.hashes, sh)
	sort.SliceStable(hs.hashes, func(i, j int) bool { return hs.hashes[i].rev < hs.hashes[j].rev })
	if len(hs.hashes) > storedHashes {
		hs.hashes = append([]*storedHash(nil), hs.hashes[len(hs.hashes)-storedHashes:]...)
	}
	hs.mu.Unlock()
	go func() {
		sh.h, sh.err = pacedCompactionHash(before, rev, hashSlice, halfDuty())
		before = nil // the versions the compaction removed go with it
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
