package watchcheck

import (
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

func put(k, v string) Change { return Change{Key: k, Value: v} }
func del(k string) Change    { return Change{Key: k, Delete: true} }

// sample is a history over revisions 2..8.
func sample() *History {
	h := &History{}
	h.Add(2, put("a", "1"))
	h.Add(3, put("b", "1"))
	h.Add(4, put("a", "2"), del("b"), put("c", "1"))
	h.Add(5, put("a", "3"))
	h.Add(6, del("a"))
	h.Add(7, put("a", "4"))
	h.Add(8, put("x/2", "1"), put("x/1", "1"))
	h.SetFinal(8)
	return h
}

var all = Spec{Name: "all", Key: "", End: "\x00", PrevKV: true}

// perfect builds what a correct server sends spec from start to end: one
// response per revision that has events for it.
func perfect(t *testing.T, h *History, spec Spec, start, end int64) []Response {
	t.Helper()
	c := build(h, nil)
	var out []Response
	for rev := start; rev <= end; rev++ {
		var evs []*mvccpb.Event
		for _, e := range c.filtered(spec, rev) {
			ev := &mvccpb.Event{Kv: proto.Clone(e.kv).(*mvccpb.KeyValue)}
			if e.delete {
				ev.Type = mvccpb.DELETE
			}
			if spec.PrevKV && e.prev != nil && !(!e.delete && e.kv.Version == 1) {
				ev.PrevKv = proto.Clone(e.prev).(*mvccpb.KeyValue)
			}
			evs = append(evs, ev)
		}
		if len(evs) > 0 {
			out = append(out, Response{Revision: rev, Events: evs})
		}
	}
	return out
}

func watchOf(spec Spec, segs ...*Segment) *Watch { return &Watch{Spec: spec, Segments: segs} }

func seg(start int64, rs ...Response) *Segment { return &Segment{Start: start, Responses: rs} }

// revResp returns the response of rs for revision rev.
func revResp(t *testing.T, rs []Response, rev int64) int {
	t.Helper()
	for i, r := range rs {
		if len(r.Events) > 0 && r.Events[0].Kv.ModRevision == rev {
			return i
		}
	}
	t.Fatalf("no response for revision %d", rev)
	return -1
}

func clone(rs []Response) []Response {
	out := make([]Response, len(rs))
	for i, r := range rs {
		out[i] = r
		out[i].Events = nil
		for _, ev := range r.Events {
			out[i].Events = append(out[i].Events, proto.Clone(ev).(*mvccpb.Event))
		}
	}
	return out
}

func wantProblems(t *testing.T, rep *Report, want ...string) {
	t.Helper()
	if len(want) == 0 {
		if err := rep.Err(); err != nil {
			t.Fatalf("unexpected problems: %v", err)
		}
		return
	}
	all := strings.Join(rep.Problems, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("no problem mentions %q; problems:\n%s", w, all)
		}
	}
}

func TestPerfectWatchesPass(t *testing.T) {
	h := sample()
	specs := []Spec{
		all,
		{Name: "a", Key: "a", PrevKV: true},
		{Name: "x", Key: "x/", End: "x0"},
		{Name: "from-b", Key: "b", End: "\x00", PrevKV: true},
		{Name: "noput", Key: "", End: "\x00", NoPut: true},
		{Name: "nodelete", Key: "", End: "\x00", NoDelete: true, PrevKV: true},
	}
	var ws []*Watch
	for _, s := range specs {
		ws = append(ws, watchOf(s, seg(2, perfect(t, h, s, 2, 8)...)))
	}
	// A watch from revision 4 whose catch-up comes in one response (as
	// etcd's unsynced watchers do), then a progress notification.
	rs := perfect(t, h, all, 4, 8)
	var merged Response
	for _, r := range rs {
		merged.Events = append(merged.Events, r.Events...)
	}
	merged.Revision = 8
	ws = append(ws, &Watch{Spec: Spec{Name: "catch-up", Key: "", End: "\x00", PrevKV: true},
		Segments: []*Segment{seg(4, merged, Response{Revision: 8, Progress: true})}})
	rep := Check(h, ws...)
	wantProblems(t, rep)
	if rep.Revisions != 7 || rep.Events == 0 {
		t.Errorf("report %s", rep)
	}
}

func TestBrokenGuaranteesAreReported(t *testing.T) {
	h := sample()
	base := perfect(t, h, all, 2, 8)
	tests := []struct {
		name   string
		mutate func(rs []Response) []*Segment
		want   []string
	}{
		{"reliable: missing revision", func(rs []Response) []*Segment {
			i := revResp(t, rs, 5)
			return []*Segment{seg(2, append(rs[:i:i], rs[i+1:]...)...)}
		}, []string{"revision 5 missing"}},
		{"unique: duplicated response", func(rs []Response) []*Segment {
			i := revResp(t, rs, 3)
			out := append(append(append([]Response{}, rs[:i+1]...), rs[i]), rs[i+1:]...)
			return []*Segment{seg(2, out...)}
		}, []string{"revision 3 delivered again"}},
		{"atomic: revision split across responses", func(rs []Response) []*Segment {
			i := revResp(t, rs, 4)
			first, second := rs[i], rs[i]
			first.Events, second.Events = rs[i].Events[:1], rs[i].Events[1:]
			out := append(append(append([]Response{}, rs[:i]...), first, second), rs[i+1:]...)
			return []*Segment{seg(2, out...)}
		}, []string{"revision 4: got", "revision 4 delivered again"}},
		{"ordered: events of a transaction reordered", func(rs []Response) []*Segment {
			evs := rs[revResp(t, rs, 4)].Events
			evs[0], evs[2] = evs[2], evs[0]
			return []*Segment{seg(2, rs...)}
		}, []string{"revision 4: event 0: wrong key"}},
		{"ordered: responses swapped", func(rs []Response) []*Segment {
			i, j := revResp(t, rs, 5), revResp(t, rs, 6)
			rs[i], rs[j] = rs[j], rs[i]
			return []*Segment{seg(2, rs...)}
		}, []string{"revision 5 delivered after revision 6"}},
		{"ordered: revisions reversed within a response", func(rs []Response) []*Segment {
			i := revResp(t, rs, 5)
			r := rs[i]
			r.Events = append(append([]*mvccpb.Event{}, rs[i+1].Events...), r.Events...)
			out := append(append(append([]Response{}, rs[:i]...), r), rs[i+2:]...)
			return []*Segment{seg(2, out...)}
		}, []string{"revision 5 after 6 in one response"}},
		{"prev_kv wrong", func(rs []Response) []*Segment {
			rs[revResp(t, rs, 5)].Events[0].PrevKv.Value = []byte("1")
			return []*Segment{seg(2, rs...)}
		}, []string{"revision 5: event 0: wrong prev_kv"}},
		{"prev_kv missing", func(rs []Response) []*Segment {
			rs[revResp(t, rs, 6)].Events[0].PrevKv = nil
			return []*Segment{seg(2, rs...)}
		}, []string{"revision 6: event 0: prev_kv missing"}},
		{"prev_kv on a create event", func(rs []Response) []*Segment {
			rs[revResp(t, rs, 7)].Events[0].PrevKv = &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("3"), CreateRevision: 2, ModRevision: 5, Version: 3}
			return []*Segment{seg(2, rs...)}
		}, []string{"a create event carries prev_kv"}},
		{"create_revision of a create event", func(rs []Response) []*Segment {
			rs[revResp(t, rs, 7)].Events[0].Kv.CreateRevision = 2
			return []*Segment{seg(2, rs...)}
		}, []string{"create_revision == mod_revision must hold exactly for version 1"}},
		{"wrong version", func(rs []Response) []*Segment {
			rs[revResp(t, rs, 5)].Events[0].Kv.Version = 7
			return []*Segment{seg(2, rs...)}
		}, []string{"wrong create_revision, version or lease"}},
		{"bookmarkable: progress ahead of events", func(rs []Response) []*Segment {
			i := revResp(t, rs, 5)
			out := append(append(append([]Response{}, rs[:i]...), Response{Revision: 6, Progress: true}), rs[i:]...)
			return []*Segment{seg(2, out...)}
		}, []string{"revision 5 delivered after a progress notification at 6", "revision 6 delivered after a progress notification at 6"}},
		{"progress going back", func(rs []Response) []*Segment {
			out := append(append([]Response{}, rs...), Response{Revision: 8, Progress: true}, Response{Revision: 7, Progress: true})
			return []*Segment{seg(2, out...)}
		}, []string{"progress notification at 7 after one at 8"}},
		{"progress then missing events", func(rs []Response) []*Segment {
			i := revResp(t, rs, 6)
			out := append(append([]Response{}, rs[:i]...), Response{Revision: 8, Progress: true})
			return []*Segment{seg(2, out...)}
		}, []string{"revision 6 missing", "revision 7 missing", "revision 8 missing"}},
		{"event before the start revision", func(rs []Response) []*Segment {
			return []*Segment{seg(3, rs...)}
		}, []string{"event at revision 2 before the start revision 3"}},
		{"resumable: resumed after a gap", func(rs []Response) []*Segment {
			i := revResp(t, rs, 5)
			return []*Segment{seg(2, rs[:i]...), seg(6, rs[i+1:]...)}
		}, []string{"segment 1 resumed from revision 6, want 5", "revision 5 missing"}},
		{"resumable: resumed too early", func(rs []Response) []*Segment {
			i := revResp(t, rs, 5)
			return []*Segment{seg(2, rs[:i+1]...), seg(5, rs[i:]...)}
		}, []string{"segment 1 resumed from revision 5, want 6", "revision 5 delivered again"}},
		{"header revision below its events", func(rs []Response) []*Segment {
			rs[revResp(t, rs, 5)].Revision = 4
			return []*Segment{seg(2, rs...)}
		}, []string{"response header revision 4 below its last event's 5"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(h, watchOf(all, tc.mutate(clone(base))...))
			if len(rep.Problems) == 0 {
				t.Fatalf("no problem found")
			}
			wantProblems(t, rep, tc.want...)
		})
	}
}

func TestResumeIsAccepted(t *testing.T) {
	h := sample()
	rs := perfect(t, h, all, 2, 8)
	i := revResp(t, rs, 5)
	// Resume after an event, and after a progress notification.
	w1 := watchOf(all, seg(2, rs[:i]...), seg(5, rs[i:]...))
	w2 := watchOf(all, seg(2, append(append([]Response{}, rs[:i+1]...), Response{Revision: 5, Progress: true})...),
		seg(6, rs[i+1:]...))
	w2.Name = "after-progress"
	wantProblems(t, Check(h, w1, w2))
}

func TestCompactionGapIsAccepted(t *testing.T) {
	h := sample()
	rs := perfect(t, h, all, 2, 8)
	i := revResp(t, rs, 4)
	w := watchOf(all, seg(2, append(append([]Response{}, rs[:i]...), Response{Canceled: true, CompactRevision: 6})...),
		seg(6, rs[revResp(t, rs, 6):]...))
	wantProblems(t, Check(h, w))
}

// A watcher at exactly the compacted revision is not canceled, and its
// event there comes without prev_kv (the previous version is compacted).
func TestPrevKVOmittedAtCompactedRevision(t *testing.T) {
	h := sample()
	rs := perfect(t, h, all, 4, 8)
	rs[revResp(t, rs, 5)].Events[0].PrevKv = nil
	w := watchOf(all, seg(4, rs...))
	wantProblems(t, Check(h, w), "revision 5: event 0: prev_kv missing")
	h.Compacted(5)
	wantProblems(t, Check(h, w))
	// Only at the compacted revision itself.
	rs[revResp(t, rs, 4)].Events[0].PrevKv = nil
	wantProblems(t, Check(h, w), "revision 4: event 0: prev_kv missing")
}

func TestFilteredWatchGetsWrongEvent(t *testing.T) {
	h := sample()
	s := Spec{Name: "nodelete", Key: "", End: "\x00", NoDelete: true}
	rs := perfect(t, h, Spec{Key: "", End: "\x00"}, 2, 8)
	wantProblems(t, Check(h, watchOf(s, seg(2, rs...))), "revision 4: got", "revision 6: got")
}

func TestUnknownWrites(t *testing.T) {
	h := sample()
	h.Unknown(put("u", "applied"))
	h.Unknown(put("u", "lost"))
	// The applied one took revision 9; a watch saw it.
	full := perfect(t, h, all, 2, 8)
	ev9 := Response{Revision: 9, Events: []*mvccpb.Event{{Kv: &mvccpb.KeyValue{Key: []byte("u"), Value: []byte("applied"), CreateRevision: 9, ModRevision: 9, Version: 1}}}}
	rep := Check(h, watchOf(all, seg(2, append(full, ev9)...)))
	wantProblems(t, rep)
	if rep.Resolved != 1 || rep.Unresolved != 1 {
		t.Errorf("report %s", rep)
	}
	// A watch that missed it is caught.
	w2 := watchOf(Spec{Name: "u", Key: "u"}, seg(2, Response{Revision: 9, Progress: true}))
	wantProblems(t, Check(h, watchOf(all, seg(2, append(full, ev9)...)), w2), "watch u: revision 9 missing")

	// Applied twice.
	ev10 := ev9
	ev10.Events = []*mvccpb.Event{{Kv: &mvccpb.KeyValue{Key: []byte("u"), Value: []byte("applied"), CreateRevision: 9, ModRevision: 10, Version: 2}}}
	ev10.Revision = 10
	wantProblems(t, Check(h, watchOf(all, seg(2, append(full, ev9, ev10)...))), "applied at several revisions")
}

func TestUnaccountedRevision(t *testing.T) {
	h := &History{}
	h.Add(2, put("a", "1"))
	h.Add(4, put("a", "2"))
	wantProblems(t, Check(h), "1 revisions up to 4 are accounted for by no write")
	h2 := &History{}
	h2.Add(2, put("a", "1"))
	h2.Add(2, put("b", "1"))
	wantProblems(t, Check(h2), "two acknowledged writes at revision 2")
	h3 := &History{}
	h3.Add(2, del("a"))
	wantProblems(t, Check(h3), `revision 2 deletes "a", which does not exist`)
}

func TestFromPBMergesFragments(t *testing.T) {
	ev := func(rev int64) *mvccpb.Event {
		return &mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte("k"), ModRevision: rev, CreateRevision: 2, Version: rev - 1}}
	}
	hdr := &pb.ResponseHeader{Revision: 9}
	rs := FromPB([]*pb.WatchResponse{
		{Header: hdr, Created: true},
		{Header: hdr, Events: []*mvccpb.Event{ev(2), ev(3)}, Fragment: true},
		{Header: hdr, Events: []*mvccpb.Event{ev(4)}},
		{Header: hdr},
		{Canceled: true, CompactRevision: 5},
	}, time.Now())
	if len(rs) != 3 || len(rs[0].Events) != 3 || !rs[1].Progress || rs[2].CompactRevision != 5 || rs[2].Progress {
		t.Fatalf("FromPB = %+v", rs)
	}
}
