// Package rvmap maps a zketcd root's etcd revisions and keys to the
// ZooKeeper transactions (zxids) that made them, by replaying the root's log
// directly from ZooKeeper (not through a zketcd instance). It is the logic
// of `zketcd rv`, importable by tests.
package rvmap

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Index is a replayed root: its view at the head and, for every log entry
// since the current base generation, the revisions it holds and its zxid.
type Index struct {
	// Root is the zketcd root in ZooKeeper.
	Root string
	// Head is the newest log entry when the index was built.
	Head    zkstore.Head
	view    *revision.View
	entries []span
}

// span is the revisions one log entry's transactions took, or (gap) the
// revisions one of its OpBumpRev ops skipped.
type span struct {
	first, last, lsn, zxid int64
	gap                    bool
}

// Open connects to ZooKeeper with cfg, builds the index and disconnects.
// It only reads: a missing root is an error (zkstore.ErrNoRoot), and a root
// is never re-ACLed.
func Open(ctx context.Context, cfg zkstore.Config) (*Index, error) {
	st, err := zkstore.OpenInspector(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return Load(ctx, st)
}

// Load builds the index from an open store.
func Load(ctx context.Context, st *zkstore.Store) (*Index, error) {
	ix := &Index{Root: st.Root()}
	prev := int64(0) // the revision before the entry's ops (0: not known yet)
	view, head, _, err := engine.Replay(ctx, st, engine.DefaultReadWindow, func(e *revision.Entry) {
		start := len(ix.entries)
		for _, op := range e.Ops {
			switch op.Kind {
			case revision.OpBumpRev:
				ix.entries = append(ix.entries, span{first: prev + 1, last: op.Rev, lsn: e.LSN, zxid: e.Zxid, gap: true})
				prev = op.Rev
			case revision.OpTxn:
				if n := len(ix.entries); n > start && !ix.entries[n-1].gap {
					ix.entries[n-1].last = op.Rev
				} else {
					ix.entries = append(ix.entries, span{first: op.Rev, last: op.Rev, lsn: e.LSN, zxid: e.Zxid})
				}
				prev = op.Rev
			}
		}
	})
	if err != nil {
		return nil, err
	}
	// A gap in the first entries after the base starts after the base's
	// revision, known only now: the replay's view started there.
	if len(ix.entries) > 0 && ix.entries[0].gap && ix.entries[0].first == 1 {
		if b, err := st.ReadBase(); err == nil && b.Gen != 0 {
			ix.entries[0].first = b.Rev + 1
		}
	}
	ix.view, ix.Head = view, head
	return ix, nil
}

// Key is a live key's revisions and the zxids that committed them.
type Key struct {
	Key   string
	Found bool
	// CreateRevision, ModRevision and Version are etcd's.
	CreateRevision, ModRevision, Version int64
	// CreateZxid and ModZxid are the zxids of the ZooKeeper transactions
	// that committed CreateRevision and ModRevision.
	CreateZxid, ModZxid int64
}

// Key looks a key up at the head.
func (ix *Index) Key(k string) Key {
	out := Key{Key: k}
	_ = ix.view.Read(func(r revision.Reader) error {
		return r.Range([]byte(k), nil, 0, func(kv *revision.KeyValue) bool {
			out = Key{Key: k, Found: true, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
				Version: kv.Version, CreateZxid: kv.CreateZxid, ModZxid: kv.ModZxid}
			return false
		})
	})
	return out
}

// Revision is where a revision was committed.
type Revision struct {
	Revision int64
	// Found is false for a revision not in the log: in the future
	// (Future) or folded into the current base generation by a physical
	// compaction (Compacted).
	Found, Future, Compacted bool
	// Sentinel is true for revision 1, the empty store, made by the
	// transaction that created the root.
	Sentinel bool
	// Gap is true for a revision no transaction took: a mirrored root
	// (zketcd mirror --prefix) skipped it, as another cluster of the
	// source etcd took it; LSN and Zxid are then those of the entry that
	// moved the revision past it (revision.OpBumpRev).
	Gap bool
	// LSN is the log entry that holds the revision, Zxid the zxid of the
	// ZooKeeper transaction (the multi) that created that entry.
	LSN, Zxid int64
}

// Revision maps a revision to its log entry and zxid.
func (ix *Index) Revision(rev int64) Revision {
	if rev == 1 {
		return Revision{Revision: 1, Found: true, Sentinel: true, LSN: 1}
	}
	i := sort.Search(len(ix.entries), func(i int) bool { return ix.entries[i].last >= rev })
	if i == len(ix.entries) || ix.entries[i].first > rev {
		return Revision{Revision: rev, Future: rev > ix.Head.Rev, Compacted: rev <= ix.Head.Rev && (i == 0 || rev < ix.entries[0].first)}
	}
	sp := ix.entries[i]
	return Revision{Revision: rev, Found: !sp.gap, Gap: sp.gap, LSN: sp.lsn, Zxid: sp.zxid}
}

// WriteTable prints the keys and revisions as `zketcd rv` does.
func (ix *Index) WriteTable(out io.Writer, keys []string, revs []int64) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "# root %s: head entry %d, revision %d, zxid %s\n", ix.Root, ix.Head.LSN, ix.Head.Rev, ZxidString(ix.Head.Zxid))
	if len(keys) > 0 {
		fmt.Fprintln(w, "KEY\tCREATE_REV\tMOD_REV\tVERSION\tCZXID\tMZXID")
		for _, k := range keys {
			kv := ix.Key(k)
			if !kv.Found {
				fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\n", k)
				continue
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\n", k, kv.CreateRevision, kv.ModRevision, kv.Version,
				ZxidString(kv.CreateZxid), ZxidString(kv.ModZxid))
		}
	}
	if len(revs) > 0 {
		fmt.Fprintln(w, "REVISION\tLOG_ENTRY\tZXID")
		for _, rv := range revs {
			r := ix.Revision(rv)
			switch {
			case r.Sentinel:
				fmt.Fprintf(w, "%d\t1\t(empty store)\n", rv)
			case r.Future:
				fmt.Fprintf(w, "%d\t-\t(after the head revision)\n", rv)
			case r.Compacted:
				fmt.Fprintf(w, "%d\t-\t(compacted into the base generation; its log entry is gone)\n", rv)
			case r.Gap:
				fmt.Fprintf(w, "%d\t%d\t%s (a revision gap: no change here; the mirrored source's other clusters took it)\n", rv, r.LSN, ZxidString(r.Zxid))
			case !r.Found:
				fmt.Fprintf(w, "%d\t-\t-\n", rv)
			default:
				fmt.Fprintf(w, "%d\t%d\t%s\n", rv, r.LSN, ZxidString(r.Zxid))
			}
		}
	}
	return w.Flush()
}

// ZxidString shows a zxid in hex and as epoch:counter, "-" for 0.
func ZxidString(z int64) string {
	if z == 0 {
		return "-"
	}
	return fmt.Sprintf("0x%x (%d:%d)", z, z>>32, z&0xffffffff)
}
