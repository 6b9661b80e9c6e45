package faults

import (
	"os"
	"path/filepath"
	"testing"
)

func TestKeptSectionsSurviveARewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reliability.md")
	if got := keptSections(path); got != "" {
		t.Fatalf("missing file: %q", got)
	}
	if err := os.WriteFile(path, []byte("# old table\n\n"+keptMarker+"\n## Soak\nfigures\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := keptSections(path), "\n"+keptMarker+"\n## Soak\nfigures\n"; got != want {
		t.Fatalf("keptSections = %q, want %q", got, want)
	}
}
