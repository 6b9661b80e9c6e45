package zkstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

func openStoreWith(t *testing.T, cfg Config) *Store {
	t.Helper()
	lg := testutil.Logger(logrus.WarnLevel)
	cfg.Logger = lg
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

func rawEntryFormat(t *testing.T, c *zk.Conn, s *Store, lsn int64) byte {
	t.Helper()
	data, _, err := c.Get(s.l.entry(lsn))
	if err != nil {
		t.Fatal(err)
	}
	return data[0]
}

// A root of format 1 (written by builds before compression) keeps getting
// format-1 entries while any live member's build does not read format 2;
// once every live member does, the leader's RaiseFormat raises meta, from
// then on entries are compressed, and the other instances follow on
// RefreshFormat. Every entry reads back the same either way.
func TestTheRootFormatIsRaisedOnlyOnceEveryLiveMemberReadsIt(t *testing.T) {
	srv := zkservertest.Standalone(t)
	root := "/raise"
	a := openStoreWith(t, Config{Servers: []string{srv.Addr()}, Root: root})
	raw, _, err := zk.Connect([]string{srv.Addr()}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// Make it a root of the previous build: meta format 1.
	meta, _ := json.Marshal(Meta{Format: 1, ClusterID: a.Meta().ClusterID})
	if _, err := raw.Set(a.l.meta(), meta, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RefreshFormat(); err != nil || a.Format() != 1 {
		t.Fatalf("format %d after reading meta 1: %v", a.Format(), err)
	}
	b := openStoreWith(t, Config{Servers: []string{srv.Addr()}, Root: root})
	if b.Format() != 1 {
		t.Fatalf("b opened a format-1 root as format %d", b.Format())
	}
	if err := a.RegisterMember(Member{ID: 1, Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterMember(Member{ID: 2, Name: "b"}); err != nil {
		t.Fatal(err)
	}
	// A member of the previous build: no reads_format in its znode.
	old, _, err := zk.Connect([]string{srv.Addr()}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Create(a.l.member(3), []byte(`{"id":3,"name":"old"}`), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	lsn, rev := int64(1), int64(1)
	commit := func(s *Store) *revision.Entry {
		t.Helper()
		e := compressibleEntry()
		lsn, rev = lsn+1, rev+1
		e.LSN, e.Ops[0].Rev = lsn, rev
		res, err := s.Commit(ctx, CommitRequest{Prev: lsn - 1, Entry: e, Rev: rev})
		if err != nil || res.Outcome != Committed {
			t.Fatalf("commit %d: %v %v", lsn, res.Outcome, err)
		}
		return e
	}
	var written []*revision.Entry
	if f, err := a.RaiseFormat(); err != nil || f != 1 {
		t.Fatalf("raised to %d with a member of the previous build live: %v", f, err)
	}
	written = append(written, commit(a))
	if f := rawEntryFormat(t, raw, a, lsn); f != entryFormat {
		t.Fatalf("entry of a format-1 root stored as format %d", f)
	}

	old.Close() // the old member goes (its ephemeral znode with it)
	testutil.Eventually(t, 10*time.Second, "raised after the old member left", func() bool {
		f, err := a.RaiseFormat()
		if err != nil {
			t.Fatal(err)
		}
		return f == MetaFormat
	})
	written = append(written, commit(a))
	if f := rawEntryFormat(t, raw, a, lsn); f != compressedEntryFormat {
		t.Fatalf("entry after the raise stored as format %d", f)
	}
	if b.Format() != 1 {
		t.Fatal("b saw the raise without reading meta")
	}
	if f, err := b.RefreshFormat(); err != nil || f != MetaFormat {
		t.Fatalf("b after RefreshFormat: %d %v", f, err)
	}
	written = append(written, commit(b))
	var read []*revision.Entry
	if err := b.ReadEntries(ctx, 2, lsn, 4, func(e *revision.Entry, _ int) error { read = append(read, e); return nil }); err != nil {
		t.Fatal(err)
	}
	for i, e := range read {
		e.Zxid, written[i].Zxid = 0, 0
		if !reflect.DeepEqual(e, written[i]) {
			t.Fatalf("entry %d reads back differently", e.LSN)
		}
	}

	// Meta says MetaFormat now: a build of root format 1 refuses the root at start.
	data, _, _ := raw.Get(a.l.meta())
	var m Meta
	if err := json.Unmarshal(data, &m); err != nil || m.Format != MetaFormat {
		t.Fatalf("meta %s: %v", data, err)
	}
}

// Base generations are written and read as streams of chunks, in either
// form, and equal what they were made from; a chunk that goes away is
// ErrBaseChanged, a changed byte is corrupt.
func TestBaseGenerationsStreamThroughChunksInBothFormats(t *testing.T) {
	srv := zkservertest.Standalone(t)
	s := openStoreWith(t, Config{Servers: []string{srv.Addr()}, Root: "/bases", MaxEntryBytes: 4 << 10})
	snap := &revision.Snapshot{State: revision.State{LSN: 5, Rev: 300, CompactRev: 300}}
	r := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 300; i++ {
		k := []byte(fmt.Sprintf("/registry/configmaps/ns/cm-%04d", i))
		v := []byte(fmt.Sprintf(`{"kind":"ConfigMap","metadata":{"name":"cm-%04d"},"data":{"a":"%x%x%x%x"}}`, i, r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()))
		snap.Keys = append(snap.Keys, revision.KeyHistory{Key: k, Versions: []*revision.KeyValue{
			{Key: k, Value: v, ModRevision: int64(i + 1), CreateRevision: int64(i + 1), Version: 1}}})
	}
	ctx := context.Background()
	sizes := map[int]int{}
	for _, format := range []int{1, 2} {
		s.format.Store(int32(format))
		b, err := s.PrepareBase(ctx, snap, Base{version: -1}, uint64(format))
		if err != nil {
			t.Fatal(err)
		}
		if b.Chunks < 2 {
			t.Fatalf("format %d: %d chunks of 4 KiB for %d bytes", format, b.Chunks, b.Size)
		}
		sizes[format] = b.Size
		got, err := s.LoadBase(ctx, b)
		if err != nil {
			t.Fatalf("format %d: %v", format, err)
		}
		if !reflect.DeepEqual(got, snap) {
			t.Fatalf("format %d: the base reads back differently", format)
		}
		// A changed byte in a chunk is corrupt.
		p := baseChunk(b.Path, 1)
		data, _, _ := s.conn.Get(p)
		data[10] ^= 1
		if _, err := s.conn.Set(p, data, -1); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LoadBase(ctx, b); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("format %d with a changed byte: %v", format, err)
		}
		if err := s.conn.Delete(p, -1); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LoadBase(ctx, b); !errors.Is(err, ErrBaseChanged) {
			t.Fatalf("format %d without a chunk: %v", format, err)
		}
	}
	t.Logf("base of 300 keys: %d bytes in format 1, %d compressed", sizes[1], sizes[2])
	if sizes[2]*3 > sizes[1]*2 {
		t.Errorf("compressed base %d bytes, format 1 %d: less than 1.5x smaller", sizes[2], sizes[1])
	}
}
