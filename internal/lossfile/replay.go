package lossfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReplayOptions tune Replay.
type ReplayOptions struct {
	// DryRun reports what would be done and writes nothing.
	DryRun bool
	// Force writes keys changed since the fork too (by default they are
	// skipped: overwriting them would undo writes made after the restore).
	Force bool
	// AnyCluster replays into a target whose cluster ID is not the
	// header's (by default Replay stops with ErrOtherCluster before it
	// writes anything).
	AnyCluster bool
}

// ErrOtherCluster is returned by Replay when the target's cluster ID (in
// every response header) is not the loss file's.
var ErrOtherCluster = errors.New("the target is not the cluster the loss file was written for")

// Action is what Replay did, or would do in a dry run, with one key.
type Action struct {
	Record Record
	// Verb is "put", "delete" or "skip"; Why explains a skip or a change
	// to the record (a lease that no longer exists).
	Verb string
	Why  string
}

func (a Action) String() string {
	key := a.Record.KeyText
	if key == "" {
		key = fmt.Sprintf("%x", a.Record.Key)
	}
	s := fmt.Sprintf("%-6s %q (lost revision %d)", a.Verb, key, a.Record.Rev)
	if a.Why != "" {
		s += ": " + a.Why
	}
	return s
}

// Replay re-applies, through an etcd client, the last lost change of every
// key in recs as a new write: a put of the value the instance had, or a
// delete. A key whose mod revision is above h.ForkRev was written in
// ZooKeeper's history after the fork; it is skipped unless opts.Force (each
// write is a transaction comparing the mod revision, so a key changed while
// Replay runs is skipped too). A key that already holds the lost value (or
// is already absent) is skipped, so replaying twice changes nothing. Lost
// leases do not exist in ZooKeeper's history: their keys are put without a
// lease. It returns one Action per key, in revision order; the error is the
// first failed request.
func Replay(ctx context.Context, kv clientv3.KV, h Header, recs []Record, opts ReplayOptions) ([]Action, error) {
	var out []Action
	for _, r := range Latest(recs) {
		a := Action{Record: r, Verb: r.Op}
		get, err := kv.Get(ctx, string(r.Key))
		if err != nil {
			return out, fmt.Errorf("read %q: %w", r.Key, err)
		}
		if id := fmt.Sprintf("%x", get.Header.GetClusterId()); id != h.ClusterID && !opts.AnyCluster {
			return out, fmt.Errorf("%w: the file is of cluster %s (root %s), the target answers as cluster %s; --ignore-cluster-id replays anyway",
				ErrOtherCluster, h.ClusterID, h.Root, id)
		}
		var cur *struct {
			mod   int64
			value []byte
		}
		if len(get.Kvs) > 0 {
			cur = &struct {
				mod   int64
				value []byte
			}{get.Kvs[0].ModRevision, get.Kvs[0].Value}
		}
		switch {
		case r.Op == OpPut && cur != nil && bytes.Equal(cur.value, r.Value):
			a.Verb, a.Why = "skip", "already holds this value"
		case r.Op == OpDelete && cur == nil:
			a.Verb, a.Why = "skip", "already absent"
		case cur != nil && cur.mod > h.ForkRev && !opts.Force:
			a.Verb, a.Why = "skip", fmt.Sprintf("written after the fork (mod revision %d > %d); --force overwrites", cur.mod, h.ForkRev)
		}
		if a.Verb != "skip" && r.Op == OpPut && r.Lease != 0 {
			a.Why = fmt.Sprintf("lease %x was lost with it; put without a lease", r.Lease)
		}
		if a.Verb == "skip" || opts.DryRun {
			out = append(out, a)
			continue
		}
		op := clientv3.OpDelete(string(r.Key))
		if r.Op == OpPut {
			op = clientv3.OpPut(string(r.Key), string(r.Value))
		}
		mod := int64(0)
		if cur != nil {
			mod = cur.mod
		}
		resp, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(r.Key)), "=", mod)).Then(op).Commit()
		if err != nil {
			return out, fmt.Errorf("%s %q: %w", r.Op, r.Key, err)
		}
		if !resp.Succeeded {
			a.Verb, a.Why = "skip", "changed while replaying"
		}
		out = append(out, a)
	}
	return out, nil
}
