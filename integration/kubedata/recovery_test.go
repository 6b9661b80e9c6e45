package kubedata

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/gctune"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// TestRecoveryOfKubeLikeData times what a restart does in the process,
// without ZooKeeper: rebuilding the view from a log of kube-like entries
// (each decoded from its stored form and applied, then the compacted
// versions trimmed) or from a base generation of the same state. It only
// logs, and each mode wants a process of its own (the first touch of the
// heap is part of the cost):
//
//	KUBEDATA_RECOVERY=prepare KUBEDATA_RECOVERY_N=100000 KUBEDATA_RECOVERY_DIR=/tmp/rec
//	KUBEDATA_RECOVERY=log|base KUBEDATA_RECOVERY_DIR=/tmp/rec [KUBEDATA_RECOVERY_PREPARED=1]
//
// prepare writes entries of 64 objects, a tenth of them written again and
// a compaction to the head, and the uncompressed base of the result;
// PREPARED prepares the heap as zketcd serve does (gctune.Tuner.Load).
func TestRecoveryOfKubeLikeData(t *testing.T) {
	mode, dir := os.Getenv("KUBEDATA_RECOVERY"), os.Getenv("KUBEDATA_RECOVERY_DIR")
	if mode == "" || dir == "" {
		t.Skip("a measurement: set KUBEDATA_RECOVERY (prepare, log, base) and KUBEDATA_RECOVERY_DIR")
	}
	entries, base, rawFile := filepath.Join(dir, "entries.bin"), filepath.Join(dir, "base.bin"), filepath.Join(dir, "raw")
	switch mode {
	case "prepare":
		n, err := strconv.Atoi(os.Getenv("KUBEDATA_RECOVERY_N"))
		if err != nil || n <= 0 {
			t.Fatalf("KUBEDATA_RECOVERY_N: %q", os.Getenv("KUBEDATA_RECOVERY_N"))
		}
		prepareRecovery(t, n, entries, base, rawFile)
	case "log", "base":
		b, err := os.ReadFile(rawFile)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := strconv.ParseInt(string(b), 10, 64)
		recoverFrom(t, mode, entries, base, raw, os.Getenv("KUBEDATA_RECOVERY_PREPARED") != "")
	default:
		t.Fatalf("KUBEDATA_RECOVERY=%q: prepare, log or base", mode)
	}
}

func prepareRecovery(t *testing.T, n int, entries, base, rawFile string) {
	g := New(22)
	v := revision.NewView(1, 1)
	f, err := os.Create(entries)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lsn, rev := int64(1), int64(1)
	var raw int64
	write := func(e *revision.Entry) {
		lsn++
		e.LSN = lsn
		raw += e.DataBytes()
		stored := zkstore.EncodeEntryFormat(e, 2)
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], uint32(len(stored)))
		if _, err := f.Write(append(hdr[:], stored...)); err != nil {
			t.Fatal(err)
		}
		if _, err := v.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	objects := func(from, to int) {
		e := &revision.Entry{}
		for i := from; i < to; i++ {
			o := g.Object(i)
			rev++
			e.Ops = append(e.Ops, revision.Op{Kind: revision.OpTxn, Rev: rev, Changes: []revision.Change{{Key: []byte(o.Key), Value: o.Value}}})
		}
		write(e)
	}
	for i := 0; i < n; i += 64 {
		objects(i, min(i+64, n))
	}
	for i := 0; i < n/10; i += 64 {
		objects(i, min(i+64, n/10))
	}
	write(&revision.Entry{Ops: []revision.Op{{Kind: revision.OpCompact, Rev: rev}}})
	for v.TrimCompacted(2048) {
	}
	if err := os.WriteFile(base, zkstore.EncodeSnapshot(v.Snapshot()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rawFile, []byte(strconv.FormatInt(raw, 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d objects, a tenth written again: the log holds %d MB of data", n, raw>>20)
}

func recoverFrom(t *testing.T, mode, entries, base string, raw int64, prepared bool) {
	var stored [][]byte
	var snap []byte
	var err error
	if mode == "log" {
		b, err := os.ReadFile(entries)
		if err != nil {
			t.Fatal(err)
		}
		for len(b) >= 4 {
			n := binary.BigEndian.Uint32(b)
			stored = append(stored, b[4:4+n])
			b = b[4+n:]
		}
	} else {
		if snap, err = os.ReadFile(base); err != nil {
			t.Fatal(err)
		}
		raw = int64(len(snap))
	}
	start := time.Now()
	done := func() {}
	if prepared {
		done = gctune.New(gctune.Config{}).Load(raw + raw/4)
	}
	var v *revision.View
	if mode == "log" {
		v = revision.NewView(1, 1)
		for i, b := range stored {
			e, err := zkstore.DecodeEntry(b)
			if err != nil {
				t.Fatal(err)
			}
			e.LSN = int64(i + 2)
			if _, err := v.Apply(e); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		s, err := zkstore.DecodeSnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		if v, err = revision.FromSnapshot(s); err != nil {
			t.Fatal(err)
		}
	}
	built := time.Since(start)
	for v.TrimCompacted(2048) {
	}
	done()
	t.Logf("%s (heap prepared: %v): %d keys, view built in %v, trimmed and settled after %v",
		mode, prepared, v.KeyCount(), built.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
