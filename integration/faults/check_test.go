package faults

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/zketcd/zketcd/integration/watchcheck"
)

// sim builds synthetic histories for the checker's own tests: a store
// that makes revisions, the events an archive watch would deliver, and
// recorded operations.
type sim struct {
	rev   int64
	kvs   map[string]KV
	start time.Time
	resps []watchcheck.Response
	h     *History
}

func newSim() *sim {
	s := &sim{rev: 1, kvs: map[string]KV{}, start: time.Now()}
	s.h = &History{Start: s.start}
	return s
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// write makes the next revision with puts (key=value pairs; value ""
// deletes) and records the archive watch's response at seen.
func (s *sim) write(seen time.Duration, lease int64, kv ...string) int64 {
	s.rev++
	resp := watchcheck.Response{Revision: s.rev, At: s.start.Add(seen)}
	for i := 0; i < len(kv); i += 2 {
		k, v := kv[i], kv[i+1]
		if v == "" {
			delete(s.kvs, k)
			resp.Events = append(resp.Events, &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(k), ModRevision: s.rev}})
			continue
		}
		n := KV{Key: k, Value: v, Create: s.rev, Mod: s.rev, Ver: 1, Lse: lease}
		if old, ok := s.kvs[k]; ok {
			n.Create, n.Ver = old.Create, old.Ver+1
		}
		s.kvs[k] = n
		resp.Events = append(resp.Events, &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(k), Value: []byte(v),
			CreateRevision: n.Create, ModRevision: n.Mod, Version: n.Ver, Lease: lease}})
	}
	s.resps = append(s.resps, resp)
	return s.rev
}

func (s *sim) get(key string) []KV {
	if kv, ok := s.kvs[key]; ok {
		return []KV{kv}
	}
	return nil
}

func (s *sim) op(op *Op, call, ret int) *Op {
	op.Call, op.Return, op.ID = ms(call), ms(ret), len(s.h.Ops)
	s.h.Ops = append(s.h.Ops, op)
	return op
}

// put records an acknowledged put that made the next revision.
func (s *sim) put(worker int, key, value string, call, ret int) *Op {
	rev := s.write(ms(ret), 0, key, value)
	return s.op(&Op{Worker: worker, Kind: KindPut, Key: key, Value: value, Header: rev}, call, ret)
}

// read records a linearizable get of key at the current revision.
func (s *sim) read(worker int, key string, call, ret int) *Op {
	return s.op(&Op{Worker: worker, Kind: KindRange, Key: key, Header: s.rev, KVs: s.get(key), Count: int64(len(s.get(key)))}, call, ret)
}

func (s *sim) check(t *testing.T, elapsed time.Duration) *Result {
	t.Helper()
	return s.checkWith(t, elapsed, CheckOptions{LeaseBound: 5 * time.Second, PorcupineTimeout: time.Minute})
}

func (s *sim) checkWith(t *testing.T, elapsed time.Duration, opts CheckOptions) *Result {
	t.Helper()
	s.h.Final, s.h.Elapsed = s.rev, elapsed
	s.h.Watches = []*watchcheck.Watch{{Spec: watchcheck.Spec{Name: "archive", Key: Prefix, End: clientEnd(Prefix)},
		Segments: []*watchcheck.Segment{{Start: 2, Responses: s.resps}}}}
	return Check(s.h, opts)
}

func wantViolation(t *testing.T, r *Result, substr string) {
	t.Helper()
	for _, v := range r.Violations {
		if strings.Contains(v, substr) {
			t.Logf("found: %s", v)
			return
		}
	}
	t.Errorf("no violation containing %q in %q", substr, r.Violations)
}

func wantClean(t *testing.T, r *Result) {
	t.Helper()
	if len(r.Violations) > 0 || r.Linearizable != porcupine.Ok {
		t.Errorf("linearizable %s, violations: %q", r.Linearizable, r.Violations)
	}
}

var errUnknown = errors.New("rpc error: code = Unavailable desc = connection lost")

func TestCheckValidHistory(t *testing.T) {
	s := newSim()
	k := KubePrefix + "01"
	s.put(0, k, "v1", 0, 10)
	s.read(1, k, 5, 15)
	// CAS update on the mod revision read: succeeds.
	rev := s.write(ms(28), 0, k, "v2")
	s.op(&Op{Worker: 1, Kind: KindTxn, Cmps: []Cmp{{Key: k, Target: "mod", Op: "=", Value: 2}},
		Then: []Sub{{Kind: "put", Key: k, Value: "v2"}}, Else: []Sub{{Kind: "get", Key: k}},
		Header: rev, Succeeded: true, Results: []SubResult{{}}}, 20, 30)
	// A stale CAS fails and reads the key back.
	s.op(&Op{Worker: 0, Kind: KindTxn, Cmps: []Cmp{{Key: k, Target: "mod", Op: "=", Value: 2}},
		Then: []Sub{{Kind: "put", Key: k, Value: "v3"}}, Else: []Sub{{Kind: "get", Key: k}},
		Header: rev, Succeeded: false, Results: []SubResult{{KVs: s.get(k)}}}, 31, 40)
	// A write whose client got an error but that the watch saw applied,
	// and one it never saw.
	s.write(ms(55), 0, EtcdPrefix+"1", "u1")
	s.op(&Op{Worker: 2, Kind: KindPut, Key: EtcdPrefix + "1", Value: "u1", Err: errUnknown}, 41, 60)
	s.op(&Op{Worker: 2, Kind: KindPut, Key: EtcdPrefix + "1", Value: "u2", Err: errUnknown}, 61, 70)
	s.read(0, EtcdPrefix+"1", 71, 80)
	// A lease key and its expiry: external revisions.
	s.op(&Op{Worker: 3, Kind: KindGrant, TTL: 2, RespTTL: 2, Lease: 7}, 0, 1)
	lk := LeasePrefix + "7"
	rev = s.write(ms(2), 7, lk, "l1")
	s.op(&Op{Worker: 3, Kind: KindPut, Key: lk, Value: "l1", Lease: 7, Header: rev}, 1, 2)
	s.write(ms(2100), 0, lk, "")
	s.read(0, k, 2200, 2210)
	// A list: first page linearizable, second at its revision.
	s.put(1, KubePrefix+"02", "x", 2211, 2220)
	first := s.op(&Op{Worker: 1, Kind: KindRange, Key: KubePrefix, End: clientEnd(KubePrefix), Limit: 1, Header: s.rev,
		KVs: s.get(k), More: true, Count: 2}, 2221, 2230)
	s.put(0, KubePrefix+"03", "y", 2231, 2240)
	s.op(&Op{Worker: 1, Kind: KindPinned, Key: k + "\x00", End: clientEnd(KubePrefix), Limit: 1, Rev: first.Header, Header: s.rev,
		KVs: s.get(KubePrefix + "02"), More: false, Count: 1}, 2241, 2250)
	r := s.check(t, 3*time.Second)
	wantClean(t, r)
	if r.Resolved != 1 || r.Dropped != 1 || r.External != 2 {
		t.Errorf("resolved %d, dropped %d, external %d; want 1, 1, 2", r.Resolved, r.Dropped, r.External)
	}
}

func TestCheckStaleRead(t *testing.T) {
	s := newSim()
	k := KubePrefix + "01"
	s.put(0, k, "v1", 0, 10)
	stale := s.read(1, k, 11, 12) // header 2, v1
	s.put(0, k, "v2", 20, 30)
	// Called after the second put returned, yet answers the old state.
	s.op(&Op{Worker: 2, Kind: KindRange, Key: k, Header: stale.Header, KVs: stale.KVs, Count: 1}, 40, 50)
	r := s.check(t, time.Second)
	if r.Linearizable != porcupine.Illegal {
		t.Errorf("porcupine: %s, want Illegal", r.Linearizable)
	}
	wantViolation(t, r, "real-time order contradicts revisions")
}

func TestCheckLostWrite(t *testing.T) {
	s := newSim()
	k := EtcdPrefix + "1"
	s.put(0, k, "v1", 0, 10)
	// Acknowledged at revision 3, but revision 3 holds another value.
	s.write(ms(25), 0, k, "other")
	s.op(&Op{Worker: 1, Kind: KindPut, Key: k, Value: "acked", Header: 3}, 15, 20)
	r := s.check(t, time.Second)
	wantViolation(t, r, "acknowledged write lost or changed")
}

func TestCheckAppliedTwice(t *testing.T) {
	s := newSim()
	k := EtcdPrefix + "1"
	s.write(ms(5), 0, k, "dup")
	s.put(0, k, "v1", 6, 10)
	s.write(ms(25), 0, k, "dup")
	s.op(&Op{Worker: 1, Kind: KindPut, Key: k, Value: "dup", Err: errUnknown}, 0, 30)
	r := s.check(t, time.Second)
	wantViolation(t, r, "applied twice")
}

func TestCheckLeases(t *testing.T) {
	s := newSim()
	// Lease 1 (TTL 3 s) is deleted 1 s after its grant: early.
	s.op(&Op{Worker: 0, Kind: KindGrant, TTL: 3, RespTTL: 3, Lease: 1}, 0, 5)
	rev := s.write(ms(10), 1, LeasePrefix+"1", "a")
	s.op(&Op{Worker: 0, Kind: KindPut, Key: LeasePrefix + "1", Value: "a", Lease: 1, Header: rev}, 6, 10)
	s.write(ms(1000), 0, LeasePrefix+"1", "")
	// Lease 2 (TTL 2 s) never expires in a 30 s run.
	s.op(&Op{Worker: 0, Kind: KindGrant, TTL: 2, RespTTL: 2, Lease: 2}, 1100, 1105)
	rev = s.write(ms(1110), 2, LeasePrefix+"2", "b")
	s.op(&Op{Worker: 0, Kind: KindPut, Key: LeasePrefix + "2", Value: "b", Lease: 2, Header: rev}, 1106, 1110)
	// Lease 3 (TTL 2 s) renewed at 1.5 s: expiring at 3 s is early.
	s.op(&Op{Worker: 1, Kind: KindGrant, TTL: 2, RespTTL: 2, Lease: 3}, 0, 5)
	rev = s.write(ms(10), 3, LeasePrefix+"3", "c")
	s.op(&Op{Worker: 1, Kind: KindPut, Key: LeasePrefix + "3", Value: "c", Lease: 3, Header: rev}, 6, 10)
	s.op(&Op{Worker: 1, Kind: KindKeepAlive, Lease: 3, RespTTL: 2, Header: rev}, 1500, 1510)
	s.write(ms(3000), 0, LeasePrefix+"3", "")
	r := s.check(t, 30*time.Second)
	wantViolation(t, r, "lease 1 expired early")
	wantViolation(t, r, "lease 2 never expired")
	wantViolation(t, r, "lease 3 expired early")
}

// TestCheckLeasesBehindAChainOfLeaderChanges: a lease due between two
// faults whose second comes before the first's new leader could have
// expired it is due after the second's heal (with CheckOptions.Takeover),
// and late otherwise.
func TestCheckLeasesBehindAChainOfLeaderChanges(t *testing.T) {
	history := func() *sim {
		s := newSim()
		s.op(&Op{Worker: 0, Kind: KindGrant, TTL: 2, RespTTL: 2, Lease: 1}, 0, 5)
		rev := s.write(ms(10), 1, LeasePrefix+"1", "a")
		s.op(&Op{Worker: 0, Kind: KindPut, Key: LeasePrefix + "1", Value: "a", Lease: 1, Header: rev}, 6, 10)
		// Due 4 s (the first heal + TTL); the second fault 1.5 s later,
		// the third 1.5 s after the second's due; gone 2 s after the
		// third's due.
		s.h.Faults = []Fault{{Name: "first", Inject: ms(1000), Heal: ms(2000)},
			{Name: "second", Inject: ms(5500), Heal: ms(6500)}, {Name: "third", Inject: ms(10000), Heal: ms(11000)}}
		s.write(ms(15000), 0, LeasePrefix+"1", "")
		return s
	}
	wantClean(t, history().checkWith(t, 20*time.Second, CheckOptions{LeaseBound: 5 * time.Second, Takeover: 4 * time.Second, PorcupineTimeout: time.Minute}))
	wantViolation(t, history().check(t, 20*time.Second), "lease 1 expired 11.0s after it was due")
}

func TestCheckRevisionBackwards(t *testing.T) {
	s := newSim()
	k := EtcdPrefix + "1"
	s.put(0, k, "v1", 0, 10)
	old := s.read(1, k, 11, 12)
	s.put(0, k, "v2", 13, 20)
	s.read(1, k, 21, 22)
	s.op(&Op{Worker: 1, Kind: KindRange, Key: k, Header: old.Header, KVs: old.KVs, Count: 1}, 23, 24)
	r := s.check(t, time.Second)
	wantViolation(t, r, "revision went backwards for worker 1")
}

func TestCheckPinnedReadWrong(t *testing.T) {
	s := newSim()
	s.put(0, KubePrefix+"01", "a", 0, 10)
	s.put(0, KubePrefix+"02", "b", 11, 20)
	s.put(0, KubePrefix+"02", "c", 21, 30)
	// A page at revision 3 must see b, not c.
	s.op(&Op{Worker: 1, Kind: KindPinned, Key: KubePrefix + "01\x00", End: clientEnd(KubePrefix), Limit: 5, Rev: 3, Header: s.rev,
		KVs: s.get(KubePrefix + "02"), Count: 1}, 31, 40)
	r := s.check(t, time.Second)
	wantViolation(t, r, "read does not match the store at revision 3")
}

func TestExternalRevisions(t *testing.T) {
	e := external{3, 4, 7}
	for _, c := range []struct {
		from, to int64
		want     bool
	}{{3, 4, true}, {3, 5, false}, {5, 4, true}, {7, 7, true}, {6, 7, false}} {
		if got := e.all(c.from, c.to); got != c.want {
			t.Errorf("all(%d, %d) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

func TestRecoveryCountsAFailureForTheFaultBeforeItsReturn(t *testing.T) {
	s := newSim()
	s.h.Faults = []Fault{{Name: "first", Inject: ms(1000), Heal: ms(2000)}, {Name: "second", Inject: ms(5000), Heal: ms(6000)}}
	errTimeout := errors.New("context deadline exceeded")
	// Fails during the first fault, 0.5 s after its heal.
	s.op(&Op{Worker: 0, Kind: KindRange, Key: "f/kv/00", Err: errTimeout}, 1500, 2500)
	// Called just before the second fault and failing because of it: it
	// belongs to the second fault, not 6 s after the first one's heal.
	s.op(&Op{Worker: 1, Kind: KindRange, Key: "f/kv/01", Err: errTimeout}, 4990, 8000)
	r := s.check(t, 10*time.Second)
	if len(r.FaultStats) != 2 {
		t.Fatalf("fault stats: %+v", r.FaultStats)
	}
	first, second := r.FaultStats[0], r.FaultStats[1]
	if first.Errors != 1 || first.Recovery != ms(500) {
		t.Errorf("first fault: %d errors, recovery %v; want 1 error, 500ms", first.Errors, first.Recovery)
	}
	if second.Errors != 1 || second.Recovery != ms(2000) {
		t.Errorf("second fault: %d errors, recovery %v; want 1 error, 2s", second.Errors, second.Recovery)
	}
}

func TestProbeExpiryIsMeasuredFromTheLastHealBeforeIt(t *testing.T) {
	s := newSim()
	s.h.Faults = []Fault{
		{Name: "first", Inject: ms(1000), Heal: ms(2000), ProbeLease: 7, ProbeKey: LeasePrefix + "7", ProbeTTL: 3},
		{Name: "second", Inject: ms(4000), Heal: ms(6000)},
	}
	s.op(&Op{Worker: 0, Kind: KindGrant, TTL: 3, RespTTL: 3, Lease: 7}, 900, 905)
	rev := s.write(ms(910), 7, LeasePrefix+"7", "p")
	s.op(&Op{Worker: 0, Kind: KindPut, Key: LeasePrefix + "7", Value: "p", Lease: 7, Header: rev}, 906, 910)
	s.write(ms(9500), 0, LeasePrefix+"7", "")
	r := s.check(t, 12*time.Second)
	f := r.FaultStats[0]
	if !f.ProbeExpired || f.ProbeFrom != 1 || f.ProbeExpiry != ms(3500) {
		t.Fatalf("probe: expired %v, from fault %d, %v after its heal; want from fault 1 (the second), 3.5s", f.ProbeExpired, f.ProbeFrom, f.ProbeExpiry)
	}
}

// TestCheckFindsAStaleProbeRead: a read of the probes' key (outside the
// model) that began after a put was acknowledged and answers the revision
// before it is stale.
func TestCheckFindsAStaleProbeRead(t *testing.T) {
	s := newSim()
	s.put(0, ProbeKey, "p1", 0, 10)
	old := s.read(1, ProbeKey, 11, 12)
	s.put(2, ProbeKey, "p2", 13, 20)
	s.op(&Op{Worker: 3, Kind: KindRange, Key: ProbeKey, Header: old.Header, KVs: old.KVs, Count: 1}, 21, 22)
	r := s.check(t, time.Second)
	wantViolation(t, r, "stale: #3")
	if len(r.Violations) != 1 {
		t.Errorf("violations %q, want the stale read alone", r.Violations)
	}
}

// TestCheckStaleNoOp: with two committing instances, a transaction that
// writes nothing (a failed compare reading the key, a delete of nothing)
// answered by the state of a commit that landed before it arrived misses a
// write the other instance acknowledged meanwhile.
func TestCheckStaleNoOp(t *testing.T) {
	t.Run("failed compare with the old value", func(t *testing.T) {
		s := newSim()
		k := CASPrefix + "0-0"
		s.put(0, k, "v1", 0, 10) // revision 2, through one instance
		old := s.get(k)
		// An update on mod 2 through the other instance, acknowledged.
		rev := s.write(ms(25), 0, k, "v2")
		s.op(&Op{Worker: 1, Client: "B", Kind: KindTxn, Cmps: []Cmp{{Key: k, Target: "mod", Op: "=", Value: 2}},
			Then: []Sub{{Kind: "put", Key: k, Value: "v2"}}, Else: []Sub{{Kind: "get", Key: k}},
			Header: rev, Succeeded: true, Results: []SubResult{{}}}, 20, 30)
		// Sent after it, on its mod revision: it must succeed, but fails and
		// reads v1 at revision 2.
		s.op(&Op{Worker: 1, Client: "A", Kind: KindTxn, Cmps: []Cmp{{Key: k, Target: "mod", Op: "=", Value: rev}},
			Then: []Sub{{Kind: "put", Key: k, Value: "v3"}}, Else: []Sub{{Kind: "get", Key: k}},
			Header: 2, Succeeded: false, Results: []SubResult{{KVs: old}}}, 31, 40)
		r := s.check(t, time.Second)
		if r.Linearizable != porcupine.Illegal {
			t.Errorf("porcupine: %s, want Illegal", r.Linearizable)
		}
		wantViolation(t, r, "stale no-op (answered from a state older than its arrival): #2")
		if r.StaleNoOps != 1 {
			t.Errorf("%d stale no-ops, want 1", r.StaleNoOps)
		}
	})
	t.Run("deleted=0 after a create", func(t *testing.T) {
		s := newSim()
		k := CASPrefix + "0-0"
		rev := s.write(ms(8), 0, k, "v1")
		s.op(&Op{Worker: 0, Client: "B", Kind: KindTxn, Cmps: []Cmp{{Key: k, Target: "mod", Op: "=", Value: 0}},
			Then: []Sub{{Kind: "put", Key: k, Value: "v1"}}, Else: []Sub{{Kind: "get", Key: k}},
			Header: rev, Succeeded: true, Results: []SubResult{{}}}, 0, 10)
		s.op(&Op{Worker: 0, Client: "A", Kind: KindTxn, Then: []Sub{{Kind: "del", Key: k}},
			Header: 1, Succeeded: true, Results: []SubResult{{Deleted: 0}}}, 11, 20)
		r := s.check(t, time.Second)
		if r.Linearizable != porcupine.Illegal {
			t.Errorf("porcupine: %s, want Illegal", r.Linearizable)
		}
		wantViolation(t, r, "stale no-op (answered from a state older than its arrival): #1")
	})
	t.Run("deleted=0 at a revision holding the key", func(t *testing.T) {
		// The header is current, the answer is not: the replay finds it.
		s := newSim()
		k := CASPrefix + "0-0"
		s.put(0, k, "v1", 0, 10)
		s.op(&Op{Worker: 1, Kind: KindTxn, Then: []Sub{{Kind: "del", Key: k}},
			Header: s.rev, Succeeded: true, Results: []SubResult{{Deleted: 0}}}, 11, 20)
		r := s.check(t, time.Second)
		wantViolation(t, r, "transaction deleted nothing, but at revision 2 the key exists")
	})
}

// TestCheckResolvesAnUnknownDelete: a delete without a compare whose client
// got an error is attributed to the deletion of its key the watch saw.
func TestCheckResolvesAnUnknownDelete(t *testing.T) {
	s := newSim()
	k := CASPrefix + "0-0"
	s.put(0, k, "v1", 0, 10)
	s.write(ms(25), 0, k, "")
	s.op(&Op{Worker: 0, Kind: KindTxn, Then: []Sub{{Kind: "del", Key: k}}, Err: errUnknown}, 11, 30)
	// Of a key already gone: nothing to resolve it by, not applied.
	s.op(&Op{Worker: 0, Kind: KindTxn, Then: []Sub{{Kind: "del", Key: k}}, Err: errUnknown}, 31, 40)
	s.read(1, k, 41, 50)
	r := s.check(t, time.Second)
	wantClean(t, r)
	if r.Resolved != 1 || r.Dropped != 1 {
		t.Errorf("resolved %d, dropped %d; want 1, 1", r.Resolved, r.Dropped)
	}
}
