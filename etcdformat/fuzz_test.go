package etcdformat

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/zketcd/zketcd/revision"
)

// FuzzReadSnapshot feeds mutated snapshot databases to ReadFile: it must
// return an error or a snapshot, never panic or hang, and a snapshot it
// returns must be safe to load into a view and to hash.
func FuzzReadSnapshot(f *testing.F) {
	dir := f.TempDir()
	seed := filepath.Join(dir, "seed.db")
	if _, err := WriteDB(seed, testView(f).Snapshot(), DBInfo{ConsistentIndex: 3, Term: 1}); err != nil {
		f.Fatal(err)
	}
	data, err := os.ReadFile(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	empty := filepath.Join(dir, "empty.db")
	if _, err := WriteDB(empty, revision.NewView(1, 1).Snapshot(), DBInfo{}); err != nil {
		f.Fatal(err)
	}
	if data, err = os.ReadFile(empty); err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		tmp := t.TempDir()
		p := filepath.Join(tmp, "in.db")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		snap, _, err := ReadFile(p, ReadOptions{SkipHashCheck: true, TempDir: tmp})
		if err != nil {
			return
		}
		if _, err := HashKV(snap, 0); err != nil {
			t.Fatalf("HashKV of a decoded snapshot: %v", err)
		}
		_, _ = revision.FromSnapshot(snap)
	})
}
