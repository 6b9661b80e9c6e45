package watchcheck

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// Report is the outcome of Check.
type Report struct {
	// Problems lists every guarantee found broken (capped per watch).
	Problems []string
	// Revisions is the number of revisions the history accounts for;
	// Events the number of events checked; Resolved and Unresolved count
	// unknown writes found applied (from the events) or not.
	Revisions, Events, Resolved, Unresolved int
	// Unverifiable counts revisions delivered to a watch whose content the
	// history cannot tell (an unknown write applied but not recognised).
	Unverifiable int
}

// Err returns nil if no problem was found, else an error listing them.
func (r *Report) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	return errors.New("watch guarantees broken:\n  " + strings.Join(r.Problems, "\n  "))
}

func (r *Report) String() string {
	return fmt.Sprintf("%d revisions, %d events checked, %d unknown writes resolved, %d unresolved, %d problems",
		r.Revisions, r.Events, r.Resolved, r.Unresolved, len(r.Problems))
}

// maxProblemsPerWatch caps what one broken watch reports.
const maxProblemsPerWatch = 15

// expEvent is an event the history says revision rev must produce.
type expEvent struct {
	delete bool
	kv     *mvccpb.KeyValue // for a delete: key and mod_revision only
	prev   *mvccpb.KeyValue // the key before the change (nil: absent)
	// uncertain: an unknown write may have changed the key earlier, so
	// only the key, type, value and mod_revision are known.
	uncertain bool
}

type checker struct {
	r        *Report
	expected map[int64][]expEvent
	unknown  map[int64]bool // revisions no known write accounts for
	maxRev   int64
	// compacted: revisions a compaction was requested at.
	compacted map[int64]bool
}

// Check verifies the watches against the history (see the package
// documentation) and reports every broken guarantee.
func Check(h *History, watches ...*Watch) *Report {
	c := build(h, watches)
	for _, w := range watches {
		c.checkWatch(w)
	}
	return c.r
}

// build resolves unknown writes and rebuilds the expected events of every
// revision.
func build(h *History, watches []*Watch) *checker {
	h.mu.Lock()
	writes := append([]Write(nil), h.writes...)
	unknown := append([]Write(nil), h.unknown...)
	final := h.final
	first := max(h.first, 1)
	compacted := map[int64]bool{}
	for rev := range h.compacted {
		compacted[rev] = true
	}
	h.mu.Unlock()

	c := &checker{r: &Report{}, expected: map[int64][]expEvent{}, unknown: map[int64]bool{}, compacted: compacted}
	byRev := map[int64][]Change{}
	for _, w := range writes {
		if prev, dup := byRev[w.Rev]; dup {
			c.problem("history: two acknowledged writes at revision %d: %v and %v", w.Rev, prev, w.Changes)
			continue
		}
		byRev[w.Rev] = w.Changes
	}
	c.maxRev = final
	for rev := range byRev {
		c.maxRev = max(c.maxRev, rev)
	}
	for _, w := range watches {
		for _, s := range w.Segments {
			for _, resp := range s.Responses {
				for _, ev := range resp.Events {
					c.maxRev = max(c.maxRev, ev.Kv.ModRevision)
				}
			}
		}
	}
	unresolvedKeys := c.resolve(byRev, unknown, watches)

	// Rebuild the store revision by revision.
	state := map[string]*mvccpb.KeyValue{}
	uncertain := map[string]bool{}
	for rev := first + 1; rev <= c.maxRev; rev++ {
		changes, ok := byRev[rev]
		if !ok {
			c.unknown[rev] = true
			for k := range unresolvedKeys {
				uncertain[k] = true
			}
			continue
		}
		c.r.Revisions++
		evs := make([]expEvent, 0, len(changes))
		for _, ch := range changes {
			prev := state[ch.Key]
			ev := expEvent{delete: ch.Delete, prev: prev, uncertain: uncertain[ch.Key]}
			if ch.Delete {
				if prev == nil && !ev.uncertain {
					c.problem("history: revision %d deletes %q, which does not exist", rev, ch.Key)
				}
				ev.kv = &mvccpb.KeyValue{Key: []byte(ch.Key), ModRevision: rev}
				delete(state, ch.Key)
			} else {
				kv := &mvccpb.KeyValue{Key: []byte(ch.Key), Value: []byte(ch.Value), ModRevision: rev,
					CreateRevision: rev, Version: 1, Lease: ch.Lease}
				if prev != nil {
					kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
				}
				ev.kv = kv
				state[ch.Key] = kv
			}
			evs = append(evs, ev)
		}
		c.expected[rev] = evs
	}
	if n := len(c.unknown); n > c.r.Unresolved {
		var revs []int64
		for rev := range c.unknown {
			revs = append(revs, rev)
		}
		sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
		c.problem("history: %d revisions up to %d are accounted for by no write (%d unknown writes unresolved): %v",
			n, c.maxRev, c.r.Unresolved, head(revs, 10))
	}
	return c
}

func head[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func (c *checker) problem(format string, args ...any) {
	c.r.Problems = append(c.r.Problems, fmt.Sprintf(format, args...))
}

// resolve finds, from the events the watches saw, the revision of each
// unknown write that was applied (matching a put by key and unique value),
// adds them to byRev, and returns the keys of the unknown writes it could not
// place.
func (c *checker) resolve(byRev map[int64][]Change, unknown []Write, watches []*Watch) map[string]bool {
	type kv struct{ key, value string }
	seen := map[kv]map[int64]bool{}
	for _, w := range watches {
		for _, s := range w.Segments {
			for _, resp := range s.Responses {
				for _, ev := range resp.Events {
					if ev.Type != mvccpb.PUT {
						continue
					}
					k := kv{string(ev.Kv.Key), string(ev.Kv.Value)}
					if seen[k] == nil {
						seen[k] = map[int64]bool{}
					}
					seen[k][ev.Kv.ModRevision] = true
				}
			}
		}
	}
	unresolved := map[string]bool{}
	resolvedBy := map[int64]int{}
	for i, u := range unknown {
		revs := map[int64]bool{}
		for _, ch := range u.Changes {
			if ch.Delete {
				continue
			}
			for rev := range seen[kv{ch.Key, ch.Value}] {
				revs[rev] = true
			}
		}
		switch {
		case len(revs) == 0:
			c.r.Unresolved++
			for _, ch := range u.Changes {
				unresolved[ch.Key] = true
			}
			continue
		case len(revs) > 1:
			c.problem("history: the write %v (outcome unknown to its client) was applied at several revisions: %v", u.Changes, keysOf(revs))
			continue
		}
		var rev int64
		for r := range revs {
			rev = r
		}
		if known, ok := byRev[rev]; ok {
			if j, again := resolvedBy[rev]; again {
				c.problem("history: unknown writes %v and %v both seen at revision %d", unknown[j].Changes, u.Changes, rev)
			} else {
				c.problem("history: the write %v (outcome unknown) seen at revision %d of the acknowledged write %v", u.Changes, rev, known)
			}
			continue
		}
		byRev[rev] = u.Changes
		resolvedBy[rev] = i
		c.r.Resolved++
	}
	return unresolved
}

func keysOf(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// filtered returns the events of rev that w must receive.
func (c *checker) filtered(s Spec, rev int64) []expEvent {
	var out []expEvent
	for _, ev := range c.expected[rev] {
		if s.wants(ev) {
			out = append(out, ev)
		}
	}
	return out
}

func (c *checker) checkWatch(w *Watch) {
	if len(w.Segments) == 0 {
		return
	}
	before := len(c.r.Problems)
	problem := func(format string, args ...any) {
		if len(c.r.Problems)-before == maxProblemsPerWatch {
			c.problem("watch %s: more problems not shown", w.Name)
		}
		if len(c.r.Problems)-before > maxProblemsPerWatch {
			return
		}
		c.problem("watch %s: "+format, append([]any{w.Name}, args...)...)
	}
	start := w.Segments[0].Start
	var lastRev, bookmark int64 // last delivered event revision, highest progress revision
	delivered := map[int64]bool{}
	type gap struct{ from, to int64 } // [from, to): lost to compaction
	var gaps []gap
	compacted := int64(0)
	for si, seg := range w.Segments {
		if si > 0 {
			want := max(lastRev, bookmark, w.Segments[si-1].Start-1) + 1
			switch {
			case compacted != 0 && seg.Start > want && seg.Start <= compacted:
				gaps = append(gaps, gap{want, seg.Start})
			case seg.Start != want:
				problem("segment %d resumed from revision %d, want %d (the revision after the last observed)", si, seg.Start, want)
			}
		}
		compacted = 0
		for _, resp := range seg.Responses {
			switch {
			case resp.CompactRevision != 0:
				compacted = resp.CompactRevision
				if compacted <= max(lastRev, bookmark, seg.Start-1) {
					problem("canceled as compacted at %d although it had observed revision %d", compacted, max(lastRev, bookmark))
				}
				continue
			case resp.Canceled:
				continue
			case resp.Progress:
				if resp.Revision < bookmark {
					problem("progress notification at %d after one at %d", resp.Revision, bookmark)
				}
				if resp.Revision < lastRev {
					problem("progress notification at %d after an event at %d", resp.Revision, lastRev)
				}
				bookmark = max(bookmark, resp.Revision)
				continue
			}
			groups := groupByRev(resp.Events)
			for gi, g := range groups {
				c.r.Events += len(g)
				rev := g[0].Kv.ModRevision
				switch {
				case gi > 0 && rev < groups[gi-1][0].Kv.ModRevision:
					problem("revision %d after %d in one response", rev, groups[gi-1][0].Kv.ModRevision)
				case gi > 0 && rev == groups[gi-1][0].Kv.ModRevision:
					problem("revision %d split within one response", rev)
				}
				if rev < seg.Start {
					problem("event at revision %d before the start revision %d", rev, seg.Start)
				}
				if delivered[rev] {
					problem("revision %d delivered again (duplicated, or split across responses)", rev)
					continue
				}
				if rev <= lastRev {
					problem("revision %d delivered after revision %d", rev, lastRev)
				}
				if rev <= bookmark {
					problem("revision %d delivered after a progress notification at %d", rev, bookmark)
				}
				delivered[rev] = true
				lastRev = max(lastRev, rev)
				if msg := c.compareRevision(w.Spec, rev, g); msg != "" {
					problem("revision %d: %s", rev, msg)
				}
			}
			if n := len(resp.Events); n > 0 && resp.Revision < resp.Events[n-1].Kv.ModRevision {
				problem("response header revision %d below its last event's %d", resp.Revision, resp.Events[n-1].Kv.ModRevision)
			}
		}
	}
	// Reliable: every revision between the start and the last one observed
	// that has events for the watch was delivered.
	upTo := max(lastRev, bookmark)
	for rev := start; rev <= upTo; rev++ {
		if delivered[rev] {
			continue
		}
		lost := false
		for _, g := range gaps {
			lost = lost || (rev >= g.from && rev < g.to)
		}
		if lost {
			continue
		}
		if want := c.filtered(w.Spec, rev); len(want) > 0 {
			problem("revision %d missing (observed up to %d): want %s", rev, upTo, summarizeExp(want))
		}
	}
}

func groupByRev(evs []*mvccpb.Event) [][]*mvccpb.Event {
	var out [][]*mvccpb.Event
	for i := 0; i < len(evs); {
		j := i + 1
		for j < len(evs) && evs[j].Kv.ModRevision == evs[i].Kv.ModRevision {
			j++
		}
		out = append(out, evs[i:j])
		i = j
	}
	return out
}

// compareRevision compares the events a watch got for rev with the history.
func (c *checker) compareRevision(s Spec, rev int64, got []*mvccpb.Event) string {
	if c.unknown[rev] {
		c.r.Unverifiable++
		return ""
	}
	want := c.filtered(s, rev)
	if len(got) != len(want) {
		return fmt.Sprintf("got %s, want %s", summarizeGot(got), summarizeExp(want))
	}
	for i := range got {
		if c.compacted[rev] && got[i].PrevKv == nil {
			// prev_kv left out: the previous version is below the
			// compaction at this very revision.
			if msg := compareEvent(got[i], want[i], false); msg != "" {
				return fmt.Sprintf("event %d: %s (got %s, want %s)", i, msg, summarizeGot(got), summarizeExp(want))
			}
			continue
		}
		if msg := compareEvent(got[i], want[i], s.PrevKV); msg != "" {
			return fmt.Sprintf("event %d: %s (got %s, want %s)", i, msg, summarizeGot(got), summarizeExp(want))
		}
	}
	return ""
}

func compareEvent(got *mvccpb.Event, want expEvent, prevKV bool) string {
	kv := got.Kv
	if want.delete != (got.Type == mvccpb.DELETE) {
		return "wrong type"
	}
	if string(kv.Key) != string(want.kv.Key) {
		return "wrong key"
	}
	if kv.ModRevision != want.kv.ModRevision {
		return "wrong mod_revision"
	}
	if want.delete {
		if len(kv.Value) != 0 || kv.CreateRevision != 0 || kv.Version != 0 || kv.Lease != 0 {
			return "a delete event's kv holds more than key and mod_revision"
		}
	} else {
		if string(kv.Value) != string(want.kv.Value) {
			return "wrong value"
		}
		if (kv.CreateRevision == kv.ModRevision) != (kv.Version == 1) {
			return "create_revision == mod_revision must hold exactly for version 1 (a create)"
		}
		if !want.uncertain && (kv.CreateRevision != want.kv.CreateRevision || kv.Version != want.kv.Version || kv.Lease != want.kv.Lease) {
			return "wrong create_revision, version or lease"
		}
	}
	isCreate := !want.delete && kv.Version == 1
	switch {
	case !prevKV || isCreate:
		if got.PrevKv != nil {
			if isCreate {
				return "a create event carries prev_kv"
			}
			return "prev_kv not asked for"
		}
	case want.uncertain:
		if got.PrevKv != nil && string(got.PrevKv.Key) != string(kv.Key) {
			return "prev_kv of another key"
		}
	case want.prev == nil:
		if got.PrevKv != nil {
			return "prev_kv for a key that did not exist"
		}
	default:
		if got.PrevKv == nil {
			return "prev_kv missing"
		}
		if !proto.Equal(got.PrevKv, want.prev) {
			return fmt.Sprintf("wrong prev_kv %s, want %s", summarizeKV(got.PrevKv), summarizeKV(want.prev))
		}
	}
	return ""
}

func summarizeGot(evs []*mvccpb.Event) string {
	parts := make([]string, len(evs))
	for i, ev := range evs {
		if ev.Type == mvccpb.DELETE {
			parts[i] = fmt.Sprintf("DELETE %q", ev.Kv.Key)
		} else {
			parts[i] = "PUT " + summarizeKV(ev.Kv)
		}
		if ev.PrevKv != nil {
			parts[i] += " prev(" + summarizeKV(ev.PrevKv) + ")"
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func summarizeExp(evs []expEvent) string {
	parts := make([]string, len(evs))
	for i, ev := range evs {
		if ev.delete {
			parts[i] = fmt.Sprintf("DELETE %q", ev.kv.Key)
		} else {
			parts[i] = "PUT " + summarizeKV(ev.kv)
		}
		if ev.prev != nil {
			parts[i] += " prev(" + summarizeKV(ev.prev) + ")"
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func summarizeKV(kv *mvccpb.KeyValue) string {
	v := string(kv.Value)
	if len(v) > 24 {
		v = v[:24] + "…"
	}
	return fmt.Sprintf("%q=%q c%d m%d v%d", kv.Key, v, kv.CreateRevision, kv.ModRevision, kv.Version)
}

// StateAt returns the key-values live at revision rev according to the
// history (keys changed by unknown writes that no watch saw may be wrong).
func StateAt(h *History, rev int64) map[string]*mvccpb.KeyValue {
	c := build(h, nil)
	state := map[string]*mvccpb.KeyValue{}
	for r := int64(2); r <= rev; r++ {
		for _, ev := range c.expected[r] {
			if ev.delete {
				delete(state, string(ev.kv.Key))
			} else {
				state[string(ev.kv.Key)] = ev.kv
			}
		}
	}
	return state
}
