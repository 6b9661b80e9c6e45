package zkstore

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/zketcd/zketcd/internal/revision"
)

// describe renders an op as "kind path" (with the version of a check, the
// flags of a create): what a commit's multi does, in order.
func describe(op any) string {
	switch o := op.(type) {
	case *zk.CheckVersionRequest:
		return fmt.Sprintf("check %s@%d", o.Path, o.Version)
	case *zk.CreateRequest:
		if o.Flags == zk.FlagEphemeral {
			return "create-ephemeral " + o.Path
		}
		return "create " + o.Path
	case *zk.DeleteRequest:
		return "delete " + o.Path
	case *zk.SetDataRequest:
		if o.Path == "/r/head" {
			return "set " + o.Path
		}
		return fmt.Sprintf("set %s@%d", o.Path, o.Version)
	}
	return fmt.Sprintf("%T", op)
}

func TestMultiOpsOfACommit(t *testing.T) {
	l := layout{root: "/r"}
	leaseOps := []revision.Op{
		{Kind: revision.OpTxn, Rev: 8},
		{Kind: revision.OpLeaseGrant, Lease: 0xa, TTL: 5},
		{Kind: revision.OpLeaseRevoke, Lease: 0xb},
		{Kind: revision.OpLeaseCheckpoint, Lease: 0xc, TTL: 1},
	}
	head := []string{"check " + l.entry(6) + "@-1", "create " + l.entry(7), "set /r/head"}
	for _, tc := range []struct {
		name   string
		req    CommitRequest
		ops    []revision.Op // the entry's
		chunks []string
		want   []string // after the head's three
		absent []int
		marker int
	}{
		{name: "a plain entry: check the predecessor, create the entry, set the head", marker: -1},
		{name: "chunks are checked first",
			chunks: []string{"c0", "c1"}, want: []string{"check /r/chunks/c0@-1", "check /r/chunks/c1@-1"}, marker: -1},
		{name: "guards, an absent one as a create and a delete",
			req:    CommitRequest{Guards: []Guard{NewGuard("/r/leases/x", 3), NewAbsentGuard("/r/readlease"), NewGuard("/r/election/n_1", -1)}},
			want:   []string{"check /r/leases/x@3", "create /r/readlease", "delete /r/readlease", "check /r/election/n_1@-1"},
			absent: []int{4}, marker: -1},
		{name: "the pipeline marker set at the version the commit chains on",
			req:    CommitRequest{Marker: &Marker{Name: "n-m", Version: 4}},
			want:   []string{"set /r/tokens/n-m@4"},
			marker: 3},
		{name: "the pipeline marker created ephemeral",
			req:    CommitRequest{Marker: &Marker{Name: "n-m", Create: true}},
			want:   []string{"create-ephemeral /r/tokens/n-m"},
			marker: 3},
		{name: "lease tokens after the guards that may check them",
			req:    CommitRequest{Guards: []Guard{NewGuard("/r/leases/b", 0)}, Marker: &Marker{Name: "n-m", Version: AnyVersion}},
			ops:    leaseOps,
			want:   []string{"check /r/leases/b@0", "set /r/tokens/n-m@-1", "create " + l.lease(0xa), "delete " + l.lease(0xb)},
			marker: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Prev, req.Rev = 6, 8
			req.Entry = &revision.Entry{LSN: 7, Ops: tc.ops}
			m := multiOps(l, zk.WorldACL(zk.PermAll), req, []byte("data"), tc.chunks)
			var got []string
			for _, op := range m.ops {
				got = append(got, describe(op))
			}
			if want := append(append([]string{}, head...), tc.want...); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("ops:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if string(m.ops[1].(*zk.CreateRequest).Data) != "data" {
				t.Fatal("the entry's znode does not hold the data")
			}
			var h Head
			if err := json.Unmarshal(m.ops[2].(*zk.SetDataRequest).Data, &h); err != nil || h.LSN != 7 || h.Rev != 8 {
				t.Fatalf("head data %s: %v", m.ops[2].(*zk.SetDataRequest).Data, err)
			}
			if len(m.absent) != len(tc.absent) {
				t.Fatalf("absent ops %v, want %v", m.absent, tc.absent)
			}
			for _, i := range tc.absent {
				if !m.absent[i] {
					t.Fatalf("absent ops %v, want %v", m.absent, tc.absent)
				}
			}
			if m.marker != tc.marker {
				t.Fatalf("marker op at %d, want %d", m.marker, tc.marker)
			}
		})
	}
}
