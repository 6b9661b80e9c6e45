package lossfile

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
)

// history applies puts and deletes at revisions 2..6, compacting at
// compactAt if it is not 0.
func history(t *testing.T, compactAt int64) *revision.View {
	t.Helper()
	v := revision.NewView(1, 1)
	put := func(k, val string) revision.Change { return revision.Change{Key: []byte(k), Value: []byte(val)} }
	del := func(k string) revision.Change { return revision.Change{Delete: true, Key: []byte(k)} }
	entries := [][]revision.Op{
		{{Kind: revision.OpTxn, Rev: 2, Changes: []revision.Change{put("a", "1"), put("b", "1")}}},
		{{Kind: revision.OpTxn, Rev: 3, Changes: []revision.Change{put("c", "1")}}},
		{{Kind: revision.OpTxn, Rev: 4, Changes: []revision.Change{put("a", "2"), del("b")}}},
		{{Kind: revision.OpTxn, Rev: 5, Changes: []revision.Change{put("d", "1")}}},
		{{Kind: revision.OpTxn, Rev: 6, Changes: []revision.Change{del("c")}}},
	}
	if compactAt != 0 {
		entries = append(entries, []revision.Op{{Kind: revision.OpCompact, Rev: compactAt}})
	}
	for i, ops := range entries {
		if _, err := v.Apply(&revision.Entry{LSN: int64(i + 2), Ops: ops}); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func show(recs []Record) string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%d %s %s=%s", r.Rev, r.Op, r.Key, r.Value))
	}
	return strings.Join(out, "; ")
}

func TestCollectListsWhatTheViewAppliedAfterTheFork(t *testing.T) {
	noFork := func(map[string]bool) ([]Record, error) {
		t.Fatal("atFork called for an uncompacted history")
		return nil, nil
	}
	for _, tc := range []struct {
		name    string
		compact int64
		fork    int64
		atFork  func(map[string]bool) ([]Record, error)
		want    string
		comp    bool
		delErr  bool
	}{
		{"every change after the fork, in order", 0, 3, noFork,
			"4 put a=2; 4 delete b=; 5 put d=1; 6 delete c=", false, false},
		{"nothing after the head", 0, 6, noFork, "", false, false},
		{"compacted: the final states, and the keys gone since the fork", 5, 3,
			func(live map[string]bool) ([]Record, error) {
				var out []Record
				for _, k := range []string{"a", "b", "c"} { // what the log held at the fork
					if !live[k] {
						out = append(out, NewRecord(0, OpDelete, []byte(k), nil))
					}
				}
				return out, nil
			},
			"4 put a=2; 5 put d=1; 0 delete b=; 0 delete c=", true, false},
		{"compacted, the state at the fork unknown", 5, 3,
			func(map[string]bool) ([]Record, error) { return nil, errors.New("no session") },
			"4 put a=2; 5 put d=1", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lost, err := Collect(history(t, tc.compact), tc.fork, tc.atFork)
			if err != nil {
				t.Fatal(err)
			}
			if got := show(lost.Records); got != tc.want || lost.Compacted != tc.comp || (lost.DeletesErr != nil) != tc.delErr {
				t.Fatalf("records %q compacted %v deletes error %v; want %q %v %v", got, lost.Compacted, lost.DeletesErr, tc.want, tc.comp, tc.delErr)
			}
		})
	}
}
