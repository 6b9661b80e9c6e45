package lossfile

import (
	"errors"

	"github.com/zketcd/zketcd/internal/revision"
)

// Lost is what a view holds beyond a fork: the records of a loss file
// and how they were found.
type Lost struct {
	Records []Record
	// Compacted says the view's history after the fork was compacted: the
	// records are then each key's final state (see Header.Compacted).
	Compacted bool
	// DeletesErr, with Compacted, is why the keys deleted after the fork
	// are not listed (atFork failed; see Header.DeletesUnknown).
	DeletesErr error
}

// Collect lists what view v applied after revision fork, up to its
// revision: every put and delete of its history after fork, in revision
// order. If that history is compacted it lists instead the keys as they
// are (those written after fork) and, from atFork (given the keys v holds),
// deletes of revision 0 for the keys that existed at the fork and v no
// longer has. The caller keeps v from moving meanwhile. The error is the
// view's.
func Collect(v *revision.View, fork int64, atFork func(live map[string]bool) ([]Record, error)) (Lost, error) {
	upTo := v.State().Rev
	var lost Lost
	_, err := v.Changes(fork+1, func(ev revision.Event) bool {
		if ev.KV.ModRevision > upTo {
			return false
		}
		if ev.Type == revision.EventDelete {
			lost.Records = append(lost.Records, NewRecord(ev.KV.ModRevision, OpDelete, ev.KV.Key, nil))
			return true
		}
		lost.Records = append(lost.Records, putRecord(ev.KV))
		return true
	})
	if !errors.Is(err, revision.ErrCompacted) {
		return lost, err
	}
	lost = Lost{Compacted: true}
	live := map[string]bool{}
	err = v.Read(func(r revision.Reader) error {
		return r.Range([]byte{}, []byte{}, 0, func(kv *revision.KeyValue) bool {
			live[string(kv.Key)] = true
			if kv.ModRevision > fork {
				lost.Records = append(lost.Records, putRecord(kv))
			}
			return true
		})
	})
	if err != nil {
		return Lost{}, err
	}
	gone, err := atFork(live)
	if err != nil {
		lost.DeletesErr = err
	}
	lost.Records = append(lost.Records, gone...)
	return lost, nil
}

func putRecord(kv *revision.KeyValue) Record {
	r := NewRecord(kv.ModRevision, OpPut, kv.Key, kv.Value)
	r.Lease, r.CreateRev, r.Version = kv.Lease, kv.CreateRevision, kv.Version
	return r
}
