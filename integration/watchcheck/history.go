// Package watchcheck verifies etcd's watch guarantees against a recorded
// history of writes.
//
// A test records every write it makes in a History (through History.Do,
// which derives each write's key changes from the request and its
// response), records watches with a Recorder (clientv3 watches that re-watch
// from the next revision when their channel closes), and calls Check. Check
// rebuilds the store's history revision by revision and verifies, for every
// watch, etcd's guarantees (https://etcd.io/docs/v3.5/learning/api_guarantees/#watch-apis):
//
//   - ordered: revisions strictly increase from response to response, and
//     within a revision events come in the order the transaction made them;
//   - unique: no event is delivered twice;
//   - atomic: the events of one revision are never split across responses
//     (fragments are merged first, as clientv3 does);
//   - reliable: no event is missing between the watch's start revision and
//     the last revision it observed (its last event or progress notification);
//   - resumable: a watch re-created from the last observed revision + 1 (a
//     new Segment) continues exactly where the previous one stopped;
//   - bookmarkable: a progress notification at revision R never runs ahead of
//     delivered events: no event at or below R arrives after it;
//
// and that every event carries the right key-value (value, create_revision,
// mod_revision, version, lease), create events having create_revision ==
// mod_revision and no prev_kv, and prev_kv — when asked for — holding the
// key's previous version.
//
// Writes whose outcome the client does not know (an error after the request
// may have been committed) are recorded with History.Unknown; Check resolves
// them from the events watches observed (every put value must be unique for
// that) and reports a write applied twice.
package watchcheck

import (
	"context"
	"fmt"
	"sort"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Change is one key change made by a write, in the order the write made it.
type Change struct {
	Key    string
	Value  string // puts only
	Delete bool
	Lease  int64 // puts only
}

func (c Change) String() string {
	if c.Delete {
		return fmt.Sprintf("DELETE %q", c.Key)
	}
	return fmt.Sprintf("PUT %q=%q", c.Key, c.Value)
}

// Write is a write that changed at least one key.
type Write struct {
	// Rev is the revision the write created; 0 if its outcome is unknown.
	Rev     int64
	Changes []Change
}

// History is the record of every write made to a key space during a test.
// It is safe for concurrent use.
type History struct {
	mu      sync.Mutex
	writes  []Write
	unknown []Write
	final   int64
	first   int64
	// compacted holds the revisions a compaction was requested at.
	compacted map[int64]bool
}

// SetFirst records that the revisions up to rev were made before the
// history began, by writes outside every watched range (a test's setup):
// the store is rebuilt from rev+1 on, empty in the watched ranges.
func (h *History) SetFirst(rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.first = rev
}

// Add records an acknowledged write that created revision rev with these
// changes, in order. A write that changed nothing is not recorded.
func (h *History) Add(rev int64, changes ...Change) {
	if len(changes) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.writes = append(h.writes, Write{Rev: rev, Changes: changes})
}

// Unknown records a write whose outcome is unknown (it may or may not have
// been applied, once). Its changes must hold at least one put with a value
// never written by another write; deletes are matched by key.
func (h *History) Unknown(changes ...Change) {
	if len(changes) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unknown = append(h.unknown, Write{Changes: changes})
}

// SetFinal records the revision of a linearizable read made after every
// write finished: the history is complete up to it.
func (h *History) SetFinal(rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.final = max(h.final, rev)
}

// Compacted records that a compaction to rev was requested (its outcome
// may be unknown). An event at exactly a compacted revision may come
// without prev_kv: as etcd, zketcd leaves prev_kv out when the previous
// version is below the compacted revision, and a watcher at the compacted
// revision itself is not canceled.
func (h *History) Compacted(rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.compacted == nil {
		h.compacted = map[int64]bool{}
	}
	h.compacted[rev] = true
}

// Writes returns the acknowledged writes, by revision.
func (h *History) Writes() []Write {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := append([]Write(nil), h.writes...)
	sort.Slice(out, func(i, j int) bool { return out[i].Rev < out[j].Rev })
	return out
}

// Len returns the number of acknowledged and unknown writes.
func (h *History) Len() (acknowledged, unknown int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.writes), len(h.unknown)
}

// Do runs op (a put, a delete or a transaction of those, possibly nested)
// through kv and records it: with the revision of its response if it
// succeeded and changed something, as Unknown if it failed (the error is
// returned; the caller decides whether an error is acceptable). Deletes
// must be built with clientv3.WithPrevKV(): the deleted keys are taken from
// the response's prev_kvs. Gets inside transactions are allowed.
func (h *History) Do(ctx context.Context, kv clientv3.KV, op clientv3.Op) (clientv3.OpResponse, error) {
	if err := checkOp(op); err != nil {
		return clientv3.OpResponse{}, err
	}
	resp, err := kv.Do(ctx, op)
	if err != nil {
		h.Unknown(intended(op)...)
		return resp, err
	}
	changes, rev, err := changesOf(op, resp)
	if err != nil {
		return resp, err
	}
	h.Add(rev, changes...)
	return resp, nil
}

func checkOp(op clientv3.Op) error {
	switch {
	case op.IsDelete():
		if !op.IsPrevKV() {
			return fmt.Errorf("watchcheck: delete of %q without WithPrevKV: its changes cannot be known", op.KeyBytes())
		}
	case op.IsTxn():
		_, thenOps, elseOps := op.Txn()
		for _, o := range append(append([]clientv3.Op(nil), thenOps...), elseOps...) {
			if err := checkOp(o); err != nil {
				return err
			}
		}
	}
	return nil
}

// intended returns the changes op would make if it succeeded: its puts and
// single-key deletes (the then branch of a transaction; callers recording
// unknown transactions use transactions without compares).
func intended(op clientv3.Op) []Change {
	switch {
	case op.IsPut():
		return []Change{{Key: string(op.KeyBytes()), Value: string(op.ValueBytes())}}
	case op.IsDelete():
		if op.RangeBytes() == nil {
			return []Change{{Key: string(op.KeyBytes()), Delete: true}}
		}
	case op.IsTxn():
		var out []Change
		_, thenOps, _ := op.Txn()
		for _, o := range thenOps {
			out = append(out, intended(o)...)
		}
		return out
	}
	return nil
}

// changesOf derives the changes a successful op made from its response.
func changesOf(op clientv3.Op, resp clientv3.OpResponse) ([]Change, int64, error) {
	switch {
	case op.IsPut():
		r := resp.Put()
		return []Change{{Key: string(op.KeyBytes()), Value: string(op.ValueBytes())}}, r.Header.Revision, nil
	case op.IsDelete():
		r := resp.Del()
		ch, err := deleteChanges(op, (*pb.DeleteRangeResponse)(r))
		return ch, r.Header.Revision, err
	case op.IsTxn():
		r := resp.Txn()
		ch, err := txnChanges(op, (*pb.TxnResponse)(r))
		return ch, r.Header.Revision, err
	case op.IsGet():
		return nil, resp.Get().Header.Revision, nil
	}
	return nil, 0, fmt.Errorf("watchcheck: unsupported op")
}

func deleteChanges(op clientv3.Op, r *pb.DeleteRangeResponse) ([]Change, error) {
	if int64(len(r.PrevKvs)) != r.Deleted {
		return nil, fmt.Errorf("watchcheck: delete of %q: %d deleted but %d prev_kvs", op.KeyBytes(), r.Deleted, len(r.PrevKvs))
	}
	out := make([]Change, len(r.PrevKvs))
	for i, kv := range r.PrevKvs {
		out[i] = Change{Key: string(kv.Key), Delete: true}
	}
	return out, nil
}

func txnChanges(op clientv3.Op, r *pb.TxnResponse) ([]Change, error) {
	_, thenOps, elseOps := op.Txn()
	ops := elseOps
	if r.Succeeded {
		ops = thenOps
	}
	if len(ops) != len(r.Responses) {
		return nil, fmt.Errorf("watchcheck: txn: %d ops but %d responses", len(ops), len(r.Responses))
	}
	var out []Change
	for i, o := range ops {
		switch {
		case o.IsPut():
			out = append(out, Change{Key: string(o.KeyBytes()), Value: string(o.ValueBytes())})
		case o.IsDelete():
			ch, err := deleteChanges(o, r.Responses[i].GetResponseDeleteRange())
			if err != nil {
				return nil, err
			}
			out = append(out, ch...)
		case o.IsTxn():
			ch, err := txnChanges(o, r.Responses[i].GetResponseTxn())
			if err != nil {
				return nil, err
			}
			out = append(out, ch...)
		}
	}
	return out, nil
}
