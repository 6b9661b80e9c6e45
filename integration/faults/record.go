// Package faults is zketcd's fault-injection suite: a concurrent clientv3
// workload (kube-apiserver-like CAS updates, creates, deletes, paginated
// lists at pinned revisions and watches with progress notifications; plus
// etcd-like puts, multi-key transactions, leases with keepalives and
// physical compactions; for some scenarios compare-and-swap workers that
// alternate instances) runs against two zketcd processes on a 3-member
// ZooKeeper ensemble while a scenario injects faults (ZooKeeper leader or
// follower killed, the whole ensemble restarted, a zketcd SIGSTOPped past its
// session timeout, killed mid-commit, partitioned from ZooKeeper, its
// ZooKeeper link slowed). Every
// request is recorded with its call and return times, every watch response
// with the time it arrived; the checkers then verify, without relying on
// timing except where the property itself is about time:
//
//   - linearizability of the KV history (porcupine, against a whole-store
//     etcd model with revisions; requests with an unknown outcome are
//     resolved from the watch events: a write whose unique value no watch
//     ever saw did not happen, one that was seen happened at that revision,
//     before the watcher received it);
//   - etcd's six watch guarantees (integration/watchcheck);
//   - no acknowledged write lost, none applied twice;
//   - no request is answered at a revision below a write acknowledged
//     before it was sent (a transaction that wrote nothing so answered is
//     a stale no-op), and one that wrote nothing matches the store at its
//     revision (its gets, its deletes of nothing);
//   - revisions never go backwards in one worker's view;
//   - reads at pinned revisions (list pages) return the store as it was;
//   - leases never expire early, and still expire after each fault heals.
package faults

import (
	"fmt"
	"strings"
	"time"
)

// Kind is what an Op did.
type Kind int

const (
	// KindRange is a linearizable Range (a key, a prefix, a list's first
	// page).
	KindRange Kind = iota
	// KindPinned is a Range at a pinned revision (a list's later pages).
	KindPinned
	// KindPut is a Put.
	KindPut
	// KindTxn is a transaction of puts, deletes and gets.
	KindTxn
	// KindCompact is a Compact with physical=true.
	KindCompact
	// KindGrant, KindKeepAlive and KindRevoke are lease requests.
	KindGrant
	KindKeepAlive
	KindRevoke
)

var kindNames = [...]string{"range", "pinned-range", "put", "txn", "compact", "lease-grant", "keepalive", "lease-revoke"}

func (k Kind) String() string { return kindNames[k] }

// KV is one key-value of a response.
type KV struct {
	Key, Value            string
	Create, Mod, Ver, Lse int64
}

func (kv KV) String() string {
	return fmt.Sprintf("%s=%s(c%d,m%d,v%d)", kv.Key, shortVal(kv.Value), kv.Create, kv.Mod, kv.Ver)
}

// showKey prints a key with its NUL bytes visible.
func showKey(k string) string { return strings.ReplaceAll(k, "\x00", `\0`) }

func shortVal(v string) string {
	if len(v) > 16 {
		return v[:16] + "…"
	}
	return v
}

// Cmp is one compare of a transaction: the key's mod revision or version
// against a value.
type Cmp struct {
	Key    string
	Target string // "mod" or "version"
	Op     string // "=" or ">"
	Value  int64
}

func (c Cmp) String() string { return fmt.Sprintf("%s(%s)%s%d", c.Target, c.Key, c.Op, c.Value) }

// Sub is one operation in a transaction branch.
type Sub struct {
	Kind  string // "put", "del", "get"
	Key   string
	Value string // puts
}

func (s Sub) String() string {
	if s.Kind == "put" {
		return fmt.Sprintf("put(%s=%s)", s.Key, shortVal(s.Value))
	}
	return fmt.Sprintf("%s(%s)", s.Kind, s.Key)
}

// SubResult is a branch operation's response.
type SubResult struct {
	KVs     []KV  // get
	Deleted int64 // del
}

// Op is one recorded request and its response.
type Op struct {
	ID     int
	Worker int    // the sequential actor that made it (-1: none)
	Client string // "A", "B" or "AB"
	Kind   Kind
	// Call and Return are offsets from the run's start (monotonic clock).
	Call, Return time.Duration

	// Request.
	Key, End string // Range: [Key, End), End "" for one key
	Limit    int64
	Rev      int64 // Range at a pinned revision; Compact's revision
	Value    string
	Lease    int64 // Put with a lease; lease requests: the lease ID
	TTL      int64 // Grant: requested
	Cmps     []Cmp
	Then     []Sub
	Else     []Sub

	// Response.
	Err       error
	Header    int64 // response header revision
	KVs       []KV  // Range
	More      bool
	Count     int64
	Succeeded bool
	Results   []SubResult // Txn branch results
	RespTTL   int64       // Grant and KeepAlive
}

// OK tells whether the request succeeded.
func (o *Op) OK() bool { return o.Err == nil }

// IsWrite tells whether the request may change keys.
func (o *Op) IsWrite() bool { return o.Kind == KindPut || o.Kind == KindTxn }

// Branch returns the branch the response says was taken.
func (o *Op) Branch() []Sub {
	if o.Kind == KindPut {
		return []Sub{{Kind: "put", Key: o.Key, Value: o.Value}}
	}
	if o.Succeeded {
		return o.Then
	}
	return o.Else
}

// PutValues returns the values every branch of the request may write.
func (o *Op) PutValues() []string {
	if o.Kind == KindPut {
		return []string{o.Value}
	}
	var out []string
	for _, s := range append(append([]Sub(nil), o.Then...), o.Else...) {
		if s.Kind == "put" {
			out = append(out, s.Value)
		}
	}
	return out
}

func (o *Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d w%d@%s [%.3fs..%.3fs] ", o.ID, o.Worker, o.Client, o.Call.Seconds(), o.Return.Seconds())
	switch o.Kind {
	case KindRange, KindPinned:
		fmt.Fprintf(&b, "range(%s", showKey(o.Key))
		if o.End != "" {
			fmt.Fprintf(&b, "..%s", showKey(o.End))
		}
		if o.Limit > 0 {
			fmt.Fprintf(&b, " limit %d", o.Limit)
		}
		if o.Rev > 0 {
			fmt.Fprintf(&b, " @rev %d", o.Rev)
		}
		b.WriteString(")")
	case KindPut:
		fmt.Fprintf(&b, "put(%s=%s", o.Key, shortVal(o.Value))
		if o.Lease != 0 {
			fmt.Fprintf(&b, " lease %x", o.Lease)
		}
		b.WriteString(")")
	case KindTxn:
		fmt.Fprintf(&b, "txn(if %v then %v else %v)", o.Cmps, o.Then, o.Else)
	case KindCompact:
		fmt.Fprintf(&b, "compact(%d, physical)", o.Rev)
	case KindGrant:
		fmt.Fprintf(&b, "lease-grant(ttl %d)", o.TTL)
	case KindKeepAlive:
		fmt.Fprintf(&b, "keepalive(%x)", o.Lease)
	case KindRevoke:
		fmt.Fprintf(&b, "lease-revoke(%x)", o.Lease)
	}
	if o.Err != nil {
		fmt.Fprintf(&b, " -> error %v", o.Err)
		return b.String()
	}
	fmt.Fprintf(&b, " -> rev %d", o.Header)
	switch o.Kind {
	case KindRange, KindPinned:
		fmt.Fprintf(&b, " %v", o.KVs)
		if o.More {
			fmt.Fprintf(&b, " more (count %d)", o.Count)
		}
	case KindTxn:
		fmt.Fprintf(&b, " succeeded=%v", o.Succeeded)
		branch := o.Branch()
		for i, r := range o.Results {
			switch {
			case r.KVs != nil:
				fmt.Fprintf(&b, " %v", r.KVs)
			case i < len(branch) && branch[i].Kind == "del":
				fmt.Fprintf(&b, " deleted=%d", r.Deleted)
			}
		}
	case KindGrant:
		fmt.Fprintf(&b, " id %x ttl %d", o.Lease, o.RespTTL)
	case KindKeepAlive:
		fmt.Fprintf(&b, " ttl %d", o.RespTTL)
	}
	return b.String()
}

// Fault is one injected fault: what, when it started, when it was healed
// (the same instant for a fault that needs no healing, as a kill of a
// server that is not restarted), and when the system was back.
type Fault struct {
	Name         string
	Inject, Heal time.Duration
	// ProbeLease is a lease granted just before the fault and never kept
	// alive, with ProbeKey attached; it must expire after the heal.
	ProbeLease int64
	ProbeKey   string
	ProbeTTL   int64
}
