package faults

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/integration/watchcheck"
)

// CheckOptions tune Check.
type CheckOptions struct {
	// LeaseBound is how late after its due time (TTL after its last
	// renewal, or after the heal of a fault that overlapped it) a lease may
	// expire.
	LeaseBound time.Duration
	// Takeover is how long after a fault's injection a new leader may
	// still be starting (the session timeout: it leads once the old
	// leader's session ended) and restart the clocks of leases it did not
	// grant. A fault injected within Takeover after a lease was due (TTL
	// after the heal of the fault before) still postpones its expiry: the
	// previous leader change may not have ended yet.
	Takeover time.Duration
	// PorcupineTimeout bounds the linearizability search (0: 5 minutes).
	PorcupineTimeout time.Duration
	// MaxLinearizabilityOps, if not 0, skips the linearizability search
	// when more operations would go into it (its memory grows with the
	// history's length: over 14 GiB for 264,000 operations); Linearizable
	// then says "not checked". The other checks run on the whole history.
	MaxLinearizabilityOps int
	// ArtifactDir, if set, receives the porcupine visualization of a
	// non-linearizable history.
	ArtifactDir string
}

// Result is what Check found.
type Result struct {
	Ops, OK, Failed   int
	Compacted         int // reads refused as compacted (not failures)
	Writes, Reads     int // successful
	Resolved, Dropped int // unknown-outcome writes found applied / not applied
	External          int // revisions made outside the model (lease keys)
	Revisions         int64
	WatchEvents       int
	Compactions       int
	Linearizable      porcupine.CheckResult
	PorcupineOps      int
	PorcupineTook     time.Duration
	Violations        []string
	FaultStats        []FaultStats
	LeasesChecked     int
	LeasesExpired     int
	MaxLeaseLateness  time.Duration // beyond the due time
	MaxProbeAfterHeal time.Duration // probe lease expiry after its fault's heal
	MaxRecovery       time.Duration // last error after a heal
	MaxErrorWindow    time.Duration
	// StaleNoOps counts the transactions that wrote nothing (a failed
	// compare, a delete of nothing) answered at a revision below a write
	// acknowledged before they were sent (each also a violation, the first
	// 20 by name).
	StaleNoOps         int
	WatchReport        string
	VisualizationPath  string
	ErrorsByClassCount map[string]int
}

// FaultStats describes one fault's effect on the clients.
type FaultStats struct {
	Fault
	Errors int
	// ErrorWindow is from the first failed request's call to the last
	// failed one's return; Recovery from the heal to that last return.
	ErrorWindow, Recovery time.Duration
	// ProbeExpiry is when the probe lease's key was seen deleted, relative
	// to the heal of the last fault injected before that, this one or a
	// later one (negative: before that heal), if ProbeExpired.
	ProbeExpiry  time.Duration
	ProbeExpired bool
	// ProbeFrom is the index of the fault ProbeExpiry is measured from.
	ProbeFrom int
	// InFlight counts the writes that were under way (called, not yet
	// answered) when the fault was injected.
	InFlight int
}

func (r *Result) violation(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// evInfo is what the watches saw of one revision.
type evInfo struct {
	events []*mvccpb.Event // from an archive watch (the whole key space)
	seen   time.Duration   // earliest arrival at any watch
	hasAll bool
}

// checker holds the derived indexes.
type checker struct {
	h      *History
	opts   CheckOptions
	r      *Result
	revs   map[int64]*evInfo
	maxRev int64
	// acked maps a revision to the acknowledged write that made it.
	acked map[int64]*Op
	// resolved maps a revision to the unknown-outcome write seen there.
	resolved map[int64]*Op
	ext      external
	// valueSeen holds every value a watch delivered.
	valueSeen map[string]bool
	// states[rev] is not kept; checks needing the state at a revision are
	// queued by revision and run during the replay.
}

// isArchive tells whether a watch covers the whole key space.
func isArchive(w *watchcheck.Watch) bool {
	return w.Key == Prefix && w.End == clientEnd(Prefix) && !w.NoPut && !w.NoDelete
}

// Check runs every checker over h.
func Check(h *History, opts CheckOptions) *Result {
	if opts.PorcupineTimeout == 0 {
		opts.PorcupineTimeout = 5 * time.Minute
	}
	c := &checker{h: h, opts: opts, r: &Result{ErrorsByClassCount: map[string]int{}},
		revs: map[int64]*evInfo{}, acked: map[int64]*Op{}, resolved: map[int64]*Op{}}
	for _, e := range h.WatchErrors {
		c.r.violation("watch: %s", e)
	}
	c.count()
	c.indexWatches()
	c.indexAcked()
	c.replay()
	c.linearizability()
	c.realTime()
	c.watches()
	c.monotonic()
	c.compacted()
	c.leases()
	c.recovery()
	return c.r
}

func (c *checker) count() {
	for _, op := range c.h.Ops {
		c.r.Ops++
		if op.OK() {
			c.r.OK++
			switch op.Kind {
			case KindPut, KindTxn:
				c.r.Writes++
			case KindRange, KindPinned:
				c.r.Reads++
			case KindCompact:
				c.r.Compactions++
			}
		} else if isCompacted(op.Err) {
			c.r.Compacted++
		} else {
			c.r.Failed++
			c.r.ErrorsByClassCount[errClass(op.Err)]++
		}
	}
}

// errClass names an error for the summary.
func errClass(err error) string {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted), strings.Contains(err.Error(), "required revision has been compacted"):
		return "compacted"
	case strings.Contains(err.Error(), "context deadline exceeded"), strings.Contains(err.Error(), "DeadlineExceeded"):
		return "timeout"
	case strings.Contains(err.Error(), "no leader"):
		return "no leader"
	case strings.Contains(err.Error(), "Unavailable"), strings.Contains(err.Error(), "unavailable"), strings.Contains(err.Error(), "connection"):
		return "unavailable"
	case strings.Contains(err.Error(), "lease not found"):
		return "lease not found"
	}
	return "other"
}

// isCompacted tells whether err is etcd's ErrCompacted.
func isCompacted(err error) bool { return err != nil && errClass(err) == "compacted" }

func (c *checker) indexWatches() {
	for _, w := range c.h.Watches {
		archive := isArchive(w)
		for _, s := range w.Segments {
			for _, resp := range s.Responses {
				at := resp.At.Sub(c.h.Start)
				for i := 0; i < len(resp.Events); {
					rev := resp.Events[i].Kv.ModRevision
					j := i
					for j < len(resp.Events) && resp.Events[j].Kv.ModRevision == rev {
						j++
					}
					c.r.WatchEvents += j - i
					info := c.revs[rev]
					if info == nil {
						info = &evInfo{seen: at}
						c.revs[rev] = info
					}
					info.seen = min(info.seen, at)
					if archive && !info.hasAll {
						info.events, info.hasAll = resp.Events[i:j], true
					}
					c.maxRev = max(c.maxRev, rev)
					i = j
				}
			}
		}
	}
	c.maxRev = max(c.maxRev, c.h.Final)
	// A value is written by one request only: it must appear at one
	// revision only.
	valueRevs := map[string]map[int64]bool{}
	c.valueSeen = map[string]bool{}
	for rev, info := range c.revs {
		for _, ev := range info.events {
			if ev.Type != mvccpb.PUT {
				continue
			}
			v := string(ev.Kv.Value)
			c.valueSeen[v] = true
			if valueRevs[v] == nil {
				valueRevs[v] = map[int64]bool{}
			}
			valueRevs[v][rev] = true
		}
	}
	for v, revs := range valueRevs {
		if len(revs) > 1 {
			c.r.violation("applied twice: value %q was written at revisions %v", v, sortedRevs(revs))
		}
	}
}

func sortedRevs(m map[int64]bool) []int64 {
	var out []int64
	for r := range m {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// writesSomething tells whether an acknowledged write changed keys,
// from its response.
func writesSomething(op *Op) bool {
	if op.Kind == KindPut {
		return true
	}
	for i, s := range op.Branch() {
		switch s.Kind {
		case "put":
			return true
		case "del":
			if op.Results[i].Deleted > 0 {
				return true
			}
		}
	}
	return false
}

func (c *checker) indexAcked() {
	for _, op := range c.h.Ops {
		if !op.OK() || !op.IsWrite() || !writesSomething(op) {
			continue
		}
		if prev, dup := c.acked[op.Header]; dup {
			c.r.violation("two acknowledged writes at revision %d:\n    %s\n    %s", op.Header, prev, op)
			continue
		}
		c.acked[op.Header] = op
		c.maxRev = max(c.maxRev, op.Header)
	}
}

// changesOf returns the key changes an acknowledged write made, from its
// request and response.
func changesOf(op *Op) []watchcheck.Change {
	var out []watchcheck.Change
	for i, s := range op.Branch() {
		switch s.Kind {
		case "put":
			out = append(out, watchcheck.Change{Key: s.Key, Value: s.Value, Lease: op.Lease})
		case "del":
			if op.Kind == KindPut || op.Results[i].Deleted > 0 {
				out = append(out, watchcheck.Change{Key: s.Key, Delete: true})
			}
		}
	}
	return out
}

func changesOfEvents(evs []*mvccpb.Event) []watchcheck.Change {
	out := make([]watchcheck.Change, len(evs))
	for i, ev := range evs {
		if ev.Type == mvccpb.DELETE {
			out[i] = watchcheck.Change{Key: string(ev.Kv.Key), Delete: true}
		} else {
			out[i] = watchcheck.Change{Key: string(ev.Kv.Key), Value: string(ev.Kv.Value), Lease: ev.Kv.Lease}
		}
	}
	return out
}

// replay walks the revisions in order over the store rebuilt from the
// archive watches' events: it attributes every revision to a request
// (acknowledged, or of unknown outcome and resolved here), finds lost
// writes, and checks reads against the store at their revision.
func (c *checker) replay() {
	unknownByValue := map[string]*Op{}
	var unknownDeletes []*Op
	for _, op := range c.h.Ops {
		if op.OK() || !op.IsWrite() {
			continue
		}
		for _, v := range op.PutValues() {
			unknownByValue[v] = op
		}
		if isDeleteTxn(op) {
			unknownDeletes = append(unknownDeletes, op)
		}
	}
	sort.Slice(unknownDeletes, func(i, j int) bool { return unknownDeletes[i].Call < unknownDeletes[j].Call })
	ackedByValue := map[string]*Op{}
	for _, op := range c.acked {
		for _, s := range op.Branch() {
			if s.Kind == "put" {
				ackedByValue[s.Value] = op
			}
		}
	}
	resolvedOp := map[*Op]int64{}

	// Reads to check against the store at a revision.
	type readAt struct {
		rev int64
		op  *Op
	}
	var reads []readAt
	for _, op := range c.h.Ops {
		switch {
		case !op.OK():
		case op.Kind == KindPinned:
			reads = append(reads, readAt{op.Rev, op})
		case op.Kind == KindRange:
			reads = append(reads, readAt{op.Header, op})
		case op.Kind == KindTxn && !writesSomething(op):
			reads = append(reads, readAt{op.Header, op})
		case op.Kind == KindTxn && len(op.Cmps) > 0:
			reads = append(reads, readAt{op.Header - 1, op}) // the compares, before the write
		}
	}
	sort.Slice(reads, func(i, j int) bool { return reads[i].rev < reads[j].rev })

	state := newStore()
	checkReads := func(upTo int64, ri *int) {
		for ; *ri < len(reads) && reads[*ri].rev <= upTo; *ri++ {
			c.checkRead(state, reads[*ri].op)
		}
	}
	ri := 0
	// Revisions up to FirstRev are the setup's, outside Prefix: the
	// model starts empty after them.
	first := max(c.h.FirstRev, 1)
	checkReads(first, &ri)
	for rev := first + 1; rev <= c.maxRev; rev++ {
		info := c.revs[rev]
		ack := c.acked[rev]
		var evs []*mvccpb.Event
		if info != nil && info.hasAll {
			evs = info.events
		}
		switch {
		case ack != nil:
			if evs == nil {
				if rev <= c.h.Final {
					c.r.violation("acknowledged write at revision %d seen by no archive watch: %s", rev, ack)
				}
			} else if msg := sameChanges(changesOf(ack), changesOfEvents(evs)); msg != "" {
				c.r.violation("acknowledged write lost or changed: %s\n    but revision %d holds %s (%s)", ack, rev, describeEvents(evs), msg)
			}
			if !isModelKey(ack.Key) && ack.Kind == KindPut {
				c.ext = append(c.ext, rev)
			}
		case evs == nil:
			if info != nil || rev <= c.h.Final {
				c.r.violation("revision %d: made by no acknowledged request and its events seen by no archive watch", rev)
			}
		default:
			var op *Op
			var hits []*Op
			for _, ev := range evs {
				if ev.Type != mvccpb.PUT {
					continue
				}
				v := string(ev.Kv.Value)
				if a := ackedByValue[v]; a != nil {
					c.r.violation("value %q of the write acknowledged at revision %d appears at revision %d: %s", v, a.Header, rev, a)
				}
				if u := unknownByValue[v]; u != nil && (len(hits) == 0 || hits[len(hits)-1] != u) {
					hits = append(hits, u)
				}
			}
			switch {
			case len(hits) > 1:
				c.r.violation("revision %d holds the values of %d requests: %s", rev, len(hits), describeEvents(evs))
			case len(hits) == 1:
				op = hits[0]
			case onlyDeletes(evs) && len(evs) == 1 && isModelKey(string(evs[0].Kv.Key)):
				key := string(evs[0].Kv.Key)
				prev, _ := state.get(key)
				for _, u := range unknownDeletes {
					if _, done := resolvedOp[u]; done || u.Then[0].Key != key || (len(u.Cmps) == 1 && u.Cmps[0].Value != prev.Mod) || u.Call > info.seen {
						continue
					}
					op = u
					break
				}
			}
			switch {
			case op != nil:
				if r0, again := resolvedOp[op]; again {
					c.r.violation("applied twice: the request %s was seen at revisions %d and %d", op, r0, rev)
					break
				}
				resolvedOp[op] = rev
				if isModelKey(op.Key) || op.Kind == KindTxn {
					c.resolved[rev] = op
				} else {
					c.ext = append(c.ext, rev)
				}
				c.r.Resolved++
			case allLeaseKeys(evs):
				c.ext = append(c.ext, rev) // a lease expired or was revoked
			default:
				c.r.violation("revision %d holds %s, which no request made", rev, describeEvents(evs))
			}
		}
		// Apply the revision.
		switch {
		case evs != nil:
			for _, ev := range evs {
				k := string(ev.Kv.Key)
				if ev.Type == mvccpb.DELETE {
					state.del(k)
				} else {
					state.put(KV{Key: k, Value: string(ev.Kv.Value), Create: ev.Kv.CreateRevision, Mod: ev.Kv.ModRevision,
						Ver: ev.Kv.Version, Lse: ev.Kv.Lease})
				}
			}
		case ack != nil:
			for _, ch := range changesOf(ack) {
				if ch.Delete {
					state.del(ch.Key)
					continue
				}
				kv := KV{Key: ch.Key, Value: ch.Value, Create: rev, Mod: rev, Ver: 1, Lse: ch.Lease}
				if old, ok := state.get(ch.Key); ok {
					kv.Create, kv.Ver = old.Create, old.Ver+1
				}
				state.put(kv)
			}
		}
		checkReads(rev, &ri)
	}
	checkReads(c.maxRev+1<<40, &ri)
	c.r.Revisions = c.maxRev
	c.r.External = len(c.ext)
	for _, op := range c.h.Ops {
		if !op.OK() && op.IsWrite() {
			if _, ok := resolvedOp[op]; !ok {
				c.r.Dropped++
			}
		}
	}
	sort.Slice(c.ext, func(i, j int) bool { return c.ext[i] < c.ext[j] })
}

// isDeleteTxn tells whether op is a Txn deleting one key, alone or on a
// compare of its mod revision (a kube-like delete), and writing nothing
// else: one of unknown outcome is resolved by the delete of its key.
func isDeleteTxn(op *Op) bool {
	return op.Kind == KindTxn && len(op.Then) == 1 && op.Then[0].Kind == "del" &&
		(len(op.Cmps) == 0 && len(op.Else) == 0 || len(op.Cmps) == 1 && op.Cmps[0].Target == "mod")
}

func onlyDeletes(evs []*mvccpb.Event) bool {
	for _, ev := range evs {
		if ev.Type != mvccpb.DELETE {
			return false
		}
	}
	return true
}

func allLeaseKeys(evs []*mvccpb.Event) bool {
	for _, ev := range evs {
		if isModelKey(string(ev.Kv.Key)) {
			return false
		}
	}
	return true
}

func describeEvents(evs []*mvccpb.Event) string {
	parts := make([]string, len(evs))
	for i, ev := range evs {
		if ev.Type == mvccpb.DELETE {
			parts[i] = "DELETE " + string(ev.Kv.Key)
		} else {
			parts[i] = fmt.Sprintf("PUT %s=%s", ev.Kv.Key, shortVal(string(ev.Kv.Value)))
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func sameChanges(want, got []watchcheck.Change) string {
	if len(want) != len(got) {
		return fmt.Sprintf("%d changes, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if w.Key != g.Key || w.Delete != g.Delete || w.Value != g.Value || w.Lease != g.Lease {
			return fmt.Sprintf("change %d is %v, want %v", i, g, w)
		}
	}
	return ""
}

// checkRead compares a read (or a transaction's compares) with the store
// replayed up to its revision.
func (c *checker) checkRead(state *store, op *Op) {
	switch op.Kind {
	case KindRange, KindPinned:
		want := state.rangeOf(op.Key, op.End)
		count := int64(len(want))
		if op.Limit > 0 && int64(len(want)) > op.Limit {
			want = want[:op.Limit]
		}
		rev := op.Header
		if op.Kind == KindPinned {
			rev = op.Rev
		}
		if !sameKVs(op.KVs, want) || count != op.Count || (op.Limit > 0 && op.More != (count > op.Limit)) {
			c.r.violation("read does not match the store at revision %d:\n    %s\n    store at %d: %v (count %d)", rev, op, rev, want, count)
		}
	case KindTxn:
		var keys []string
		for _, cm := range op.Cmps {
			keys = append(keys, cm.Key)
		}
		for _, sub := range op.Branch() {
			keys = append(keys, sub.Key)
		}
		s := state.model(keys...) // compares and gets name single keys
		holds := true
		for _, cm := range op.Cmps {
			holds = holds && s.cmpHolds(cm)
		}
		writes := writesSomething(op)
		if holds != op.Succeeded {
			at := op.Header
			if writes {
				at--
			}
			c.r.violation("transaction's compares evaluated wrongly (succeeded=%v, but at revision %d they are %v):\n    %s\n    store: %v",
				op.Succeeded, at, holds, op, s.rangeOf(op.Cmps[0].Key, ""))
			return
		}
		if !writes {
			for i, sub := range op.Branch() {
				switch {
				case sub.Kind == "get" && !sameKVs(op.Results[i].KVs, s.rangeOf(sub.Key, "")):
					c.r.violation("transaction read does not match the store at revision %d:\n    %s\n    store: %v", op.Header, op, s.rangeOf(sub.Key, ""))
				case sub.Kind == "del" && len(s.rangeOf(sub.Key, "")) > 0:
					c.r.violation("transaction deleted nothing, but at revision %d the key exists:\n    %s\n    store: %v", op.Header, op, s.rangeOf(sub.Key, ""))
				}
			}
		}
	}
}

// linearizability runs porcupine over the model operations.
func (c *checker) linearizability() {
	var ops []porcupine.Operation
	var plain []*Op
	for _, op := range c.h.Ops {
		var out mout
		switch {
		case op.OK() && (op.Kind == KindRange || op.Kind == KindPinned):
			if op.Kind == KindRange && op.End == "" && !isModelKey(op.Key) {
				continue // a probe's read: realTime checks it
			}
			out.rev = op.Header
		case op.OK() && op.IsWrite():
			if op.Kind == KindPut && !isModelKey(op.Key) {
				continue
			}
			out.rev = op.Header
		default:
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: clientID(op), Input: op, Output: out,
			Call: int64(op.Call), Return: int64(op.Return)})
		plain = append(plain, op)
	}
	for rev, op := range c.resolved {
		ret := c.revs[rev].seen
		ops = append(ops, porcupine.Operation{ClientId: clientID(op), Input: op, Output: mout{resolved: true, rev: rev},
			Call: int64(op.Call), Return: int64(max(ret, op.Call))})
		plain = append(plain, op)
	}
	c.r.PorcupineOps = len(ops)
	if m := c.opts.MaxLinearizabilityOps; m > 0 && len(ops) > m {
		c.r.Linearizable = porcupine.CheckResult(fmt.Sprintf("not checked (%d operations, over %d)", len(ops), m))
		return
	}
	model := newModel(c.ext, max(c.h.FirstRev, 1))
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, ops, c.opts.PorcupineTimeout)
	c.r.PorcupineTook = time.Since(start)
	c.r.Linearizable = res
	switch res {
	case porcupine.Illegal:
		c.r.violation("history not linearizable (porcupine, %d operations); %s", len(ops), c.explain(plain, model, info))
		if c.opts.ArtifactDir != "" {
			p := filepath.Join(c.opts.ArtifactDir, "linearizability.html")
			if err := porcupine.VisualizePath(model, info, p); err == nil {
				c.r.VisualizationPath = p
			}
		}
	case porcupine.Unknown:
		c.r.violation("linearizability check inconclusive: porcupine timed out after %v on %d operations", c.opts.PorcupineTimeout, len(ops))
	}
}

// realTime checks every successful read and write against the writes
// acknowledged before it was sent (but those of lease-attached keys, which
// every check takes as external): its header revision is not below any of
// theirs (a read that misses an acknowledged write is stale). Porcupine
// checks this too for the model's requests; this covers the probes' reads,
// which are outside the model, and names the stale read plainly, and a
// stale transaction that wrote nothing (answered from the state of a
// commit that landed before it arrived) as a stale no-op.
func (c *checker) realTime() {
	var writes, ops []*Op
	for _, op := range c.h.Ops {
		if !op.OK() || op.Header == 0 {
			continue
		}
		switch {
		case op.Kind == KindPut && strings.HasPrefix(op.Key, LeasePrefix):
			// Lease-attached keys are outside every revision check.
		case op.Kind == KindPut || op.Kind == KindTxn:
			writes = append(writes, op)
			ops = append(ops, op)
		case op.Kind == KindRange || op.Kind == KindPinned:
			ops = append(ops, op)
		}
	}
	sort.Slice(writes, func(i, j int) bool { return writes[i].Return < writes[j].Return })
	sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	var newest *Op // the acknowledged write of highest revision returned so far
	wi := 0
	reported := 0
	for _, op := range ops {
		for ; wi < len(writes) && writes[wi].Return < op.Call; wi++ {
			if newest == nil || writes[wi].Header > newest.Header {
				newest = writes[wi]
			}
		}
		if newest != nil && op.Header < newest.Header {
			noOp := op.Kind == KindTxn && !writesSomething(op)
			if noOp {
				c.r.StaleNoOps++
			}
			if reported++; reported <= 20 {
				what := "stale"
				if noOp {
					// Answered without a write of its own: by the state of a
					// commit that landed before it arrived.
					what = "stale no-op (answered from a state older than its arrival)"
				}
				c.r.violation("%s: %s (called at %.3fs) answered at revision %d, below the write acknowledged at %.3fs at revision %d: %s",
					what, op, op.Call.Seconds(), op.Header, newest.Return.Seconds(), newest.Header, newest)
			}
		}
	}
	if reported > 20 {
		c.r.violation("stale: %d more requests answered below a write acknowledged before they were sent", reported-20)
	}
}

func clientID(op *Op) int {
	if op.Worker < 0 {
		return 0
	}
	return op.Worker + 1
}

// explain looks for a minimal reason a history is not linearizable: two
// requests whose real-time order contradicts their revisions, or the
// longest linearizable prefix porcupine found and the request after it.
func (c *checker) explain(ops []*Op, model porcupine.Model, info porcupine.LinearizationInfo) string {
	resolvedAt := map[*Op]int64{}
	for rev, op := range c.resolved {
		resolvedAt[op] = rev
	}
	revOf := func(op *Op) int64 {
		if rev, ok := resolvedAt[op]; ok {
			return rev
		}
		return op.Header
	}
	type tr struct {
		op  *Op
		rev int64
		ret time.Duration
	}
	var all []tr
	for _, op := range ops {
		t := tr{op: op, rev: revOf(op), ret: op.Return}
		if !op.OK() {
			t.ret = c.revs[t.rev].seen
		}
		all = append(all, t)
	}
	byRet := append([]tr(nil), all...)
	sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
	byCall := append([]tr(nil), all...)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].op.Call < byCall[j].op.Call })
	var best *tr
	j := 0
	var reasons []string
	for _, b := range byCall {
		for ; j < len(byRet) && byRet[j].ret < b.op.Call; j++ {
			if best == nil || byRet[j].rev > best.rev {
				x := byRet[j]
				best = &x
			}
		}
		if best == nil {
			continue
		}
		write := b.op.IsWrite() && (b.op.OK() && writesSomething(b.op) || !b.op.OK())
		if best.rev > b.rev || (write && best.rev >= b.rev) {
			reasons = append(reasons, fmt.Sprintf("\n  real-time order contradicts revisions: %s\n    returned before %s\n    was called", best.op, b.op))
			if len(reasons) >= 3 {
				break
			}
		}
	}
	if len(reasons) > 0 {
		return "minimal history:" + strings.Join(reasons, "")
	}
	partial := info.PartialLinearizationsOperations()
	var longest []porcupine.Operation
	for _, p := range partial {
		for _, l := range p {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "longest linearizable prefix: %d operations, ending with:", len(longest))
	for _, o := range longest[max(0, len(longest)-5):] {
		fmt.Fprintf(&b, "\n    %s", o.Input.(*Op))
	}
	in := map[*Op]bool{}
	for _, o := range longest {
		in[o.Input.(*Op)] = true
	}
	var next []*Op
	for _, op := range ops {
		if !in[op] {
			next = append(next, op)
		}
	}
	sort.Slice(next, func(i, j int) bool { return next[i].Call < next[j].Call })
	b.WriteString("\n  the first requests not linearizable after it:")
	for _, op := range next[:min(len(next), 5)] {
		fmt.Fprintf(&b, "\n    %s", op)
	}
	return b.String()
}

// watches runs watchcheck over every watch with the history of every
// revision: acknowledged writes from their requests and responses, the
// others (resolved unknown outcomes, lease expiries) from the archive
// watches' events.
func (c *checker) watches() {
	h := &watchcheck.History{}
	h.SetFirst(c.h.FirstRev)
	for rev := max(c.h.FirstRev, 1) + 1; rev <= c.maxRev; rev++ {
		if ack := c.acked[rev]; ack != nil {
			h.Add(rev, changesOf(ack)...)
		} else if info := c.revs[rev]; info != nil && info.hasAll {
			h.Add(rev, changesOfEvents(info.events)...)
		}
	}
	h.SetFinal(c.h.Final)
	for _, op := range c.h.Ops {
		if op.Kind == KindCompact {
			h.Compacted(op.Rev)
		}
	}
	rep := watchcheck.Check(h, c.h.Watches...)
	c.r.WatchReport = rep.String()
	for _, p := range rep.Problems {
		c.r.violation("watch: %s", p)
	}
}

// monotonic checks that the revisions a worker sees never go backwards.
func (c *checker) monotonic() {
	last := map[int]*Op{}
	ops := append([]*Op(nil), c.h.Ops...)
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	for _, op := range ops {
		if op.Worker < 0 || !op.OK() || op.Kind == KindGrant || op.Kind == KindKeepAlive || op.Kind == KindRevoke {
			continue
		}
		if p := last[op.Worker]; p != nil && op.Header < p.Header {
			c.r.violation("revision went backwards for worker %d: %d then %d\n    %s\n    %s", op.Worker, p.Header, op.Header, p, op)
		}
		last[op.Worker] = op
	}
}

// compacted checks that reads refused as compacted asked for a revision
// below one a Compact was called for before they returned.
func (c *checker) compacted() {
	var compacts []*Op
	for _, op := range c.h.Ops {
		if op.Kind == KindCompact {
			compacts = append(compacts, op)
		}
	}
	for _, op := range c.h.Ops {
		if op.Kind != KindPinned || !isCompacted(op.Err) {
			continue
		}
		ok := false
		for _, cp := range compacts {
			ok = ok || (cp.Rev > op.Rev && cp.Call < op.Return)
		}
		if !ok {
			c.r.violation("read refused as compacted though no compaction above its revision was requested: %s", op)
		}
	}
}

// leases checks that no lease expired before TTL after its grant or last
// acknowledged renewal, and that every lease not revoked expired within
// LeaseBound after it was due (its TTL after the last renewal, or after
// the heal of a fault that overlapped that).
func (c *checker) leases() {
	type lease struct {
		grant   *Op
		key     string
		renewed time.Duration // latest call of an acknowledged renewal
		dueFrom time.Duration // latest return of a renewal (or the grant)
		revoke  *Op
	}
	ls := map[int64]*lease{}
	var ids []int64
	for _, op := range c.h.Ops {
		switch {
		case op.Kind == KindGrant && op.OK():
			ls[op.Lease] = &lease{grant: op, renewed: op.Call, dueFrom: op.Return}
			ids = append(ids, op.Lease)
		}
	}
	for _, op := range c.h.Ops {
		l := ls[op.Lease]
		if l == nil {
			continue
		}
		switch {
		case op.Kind == KindPut && (op.OK() || c.valueSeen[op.Value]):
			l.key = op.Key
		case op.Kind == KindKeepAlive && op.OK() && op.RespTTL > 0:
			l.renewed = max(l.renewed, op.Call)
			l.dueFrom = max(l.dueFrom, op.Return)
		case op.Kind == KindKeepAlive && !op.OK():
			l.dueFrom = max(l.dueFrom, op.Return) // it may have renewed
		case op.Kind == KindRevoke:
			l.revoke = op
		}
	}
	// When each lease key was seen deleted.
	deleted := map[string]time.Duration{}
	for rev := int64(2); rev <= c.maxRev; rev++ {
		info := c.revs[rev]
		if info == nil {
			continue
		}
		for _, ev := range info.events {
			if ev.Type == mvccpb.DELETE && !isModelKey(string(ev.Kv.Key)) {
				deleted[string(ev.Kv.Key)] = info.seen
			}
		}
	}
	end := c.h.Elapsed
	probes := map[int64]int{}
	for i, f := range c.h.Faults {
		probes[f.ProbeLease] = i
		c.r.FaultStats = append(c.r.FaultStats, FaultStats{Fault: f})
	}
	for _, id := range ids {
		l := ls[id]
		if l.key == "" {
			continue // its key's put failed
		}
		c.r.LeasesChecked++
		ttl := time.Duration(l.grant.RespTTL) * time.Second
		gone, isGone := deleted[l.key]
		if isGone {
			c.r.LeasesExpired++
		}
		revokedBefore := l.revoke != nil && (!isGone || l.revoke.Call < gone)
		if isGone && !revokedBefore && gone < l.renewed+ttl {
			c.r.violation("lease %x expired early: TTL %v, renewed (or granted) at %.3fs, its key seen deleted at %.3fs", id, ttl,
				l.renewed.Seconds(), gone.Seconds())
		}
		if i, ok := probes[id]; ok && isGone {
			// Measured from the heal of the last fault injected before the
			// key went: a later fault (the next one may come before a probe
			// could expire) restarts the lease's clock.
			from := i
			for j := i + 1; j < len(c.h.Faults); j++ {
				if c.h.Faults[j].Inject < gone {
					from = j
				}
			}
			heal := c.h.Faults[from].Heal
			c.r.FaultStats[i].ProbeFrom = from
			c.r.FaultStats[i].ProbeExpiry = gone - heal
			c.r.FaultStats[i].ProbeExpired = true
			c.r.MaxProbeAfterHeal = max(c.r.MaxProbeAfterHeal, gone-heal)
		}
		if l.revoke != nil {
			continue
		}
		due := l.dueFrom + ttl
		for _, f := range c.h.Faults {
			if f.Inject <= due+c.opts.Takeover {
				due = max(due, f.Heal+ttl)
			}
		}
		switch {
		case isGone:
			c.r.MaxLeaseLateness = max(c.r.MaxLeaseLateness, gone-due)
			if gone > due+c.opts.LeaseBound {
				c.r.violation("lease %x expired %.1fs after it was due (bound %v)", id, (gone - due).Seconds(), c.opts.LeaseBound)
			}
		case end > due+c.opts.LeaseBound:
			c.r.violation("lease %x never expired: due at %.1fs, the run ended at %.1fs (bound %v)", id, due.Seconds(), end.Seconds(), c.opts.LeaseBound)
		}
	}
}

// recovery measures how long clients saw errors around each fault. A
// failed request counts for the last fault injected before it returned: one
// called just before a fault and failing because of it belongs to that
// fault, not to the previous one.
func (c *checker) recovery() {
	for i := range c.r.FaultStats {
		fs := &c.r.FaultStats[i]
		until := c.h.Elapsed
		if i+1 < len(c.h.Faults) {
			until = c.h.Faults[i+1].Inject
		}
		var first, last time.Duration
		for _, op := range c.h.Ops {
			if op.IsWrite() && op.Call <= fs.Inject && op.Return >= fs.Inject {
				fs.InFlight++
			}
			if op.OK() || isCompacted(op.Err) || op.Kind == KindCompact || op.Return < fs.Inject || op.Return >= until {
				continue
			}
			if fs.Errors == 0 || op.Call < first {
				first = op.Call
			}
			last = max(last, op.Return)
			fs.Errors++
		}
		if fs.Errors > 0 {
			fs.ErrorWindow = last - first
			fs.Recovery = max(0, last-fs.Heal)
		}
		c.r.MaxRecovery = max(c.r.MaxRecovery, fs.Recovery)
		c.r.MaxErrorWindow = max(c.r.MaxErrorWindow, fs.ErrorWindow)
	}
}

// WriteOps writes the faults and every recorded operation, one a line, to
// path, and every watch response to path's directory as watches.txt (kept
// for a failed run).
func WriteOps(h *History, path string) error {
	var b strings.Builder
	for _, f := range h.Faults {
		fmt.Fprintf(&b, "FAULT %s injected %.3fs healed %.3fs probe lease %x\n", f.Name, f.Inject.Seconds(), f.Heal.Seconds(), f.ProbeLease)
	}
	for _, op := range h.Ops {
		b.WriteString(op.String())
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	b.Reset()
	for _, w := range h.Watches {
		for si, s := range w.Segments {
			fmt.Fprintf(&b, "WATCH %s segment %d from %d (ended: %v)\n", w.Name, si, s.Start, s.End)
			for _, r := range s.Responses {
				fmt.Fprintf(&b, "  %.3fs rev %d", r.At.Sub(h.Start).Seconds(), r.Revision)
				switch {
				case r.Progress:
					b.WriteString(" progress")
				case r.Canceled:
					fmt.Fprintf(&b, " canceled compact_revision=%d %s", r.CompactRevision, r.Err)
				}
				for _, ev := range r.Events {
					if ev.Type == mvccpb.DELETE {
						fmt.Fprintf(&b, " DELETE %s@%d", ev.Kv.Key, ev.Kv.ModRevision)
					} else {
						fmt.Fprintf(&b, " PUT %s=%s@%d(c%d,v%d,l%x)", ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision, ev.Kv.CreateRevision, ev.Kv.Version, ev.Kv.Lease)
					}
				}
				b.WriteByte('\n')
			}
		}
	}
	return os.WriteFile(filepath.Join(filepath.Dir(path), "watches.txt"), []byte(b.String()), 0o644)
}
