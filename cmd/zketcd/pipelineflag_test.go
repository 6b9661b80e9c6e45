package main

import "testing"

func TestCommitPipelineFlag(t *testing.T) {
	for in, want := range map[string]int{"auto": 0, "0": 0, "1": 1, "8": 8} {
		var d pipelineDepth
		if err := d.Set(in); err != nil || int(d) != want {
			t.Fatalf("Set(%q) = %d, %v; want %d", in, d, err, want)
		}
	}
	for _, in := range []string{"-1", "deep", ""} {
		var d pipelineDepth
		if err := d.Set(in); err == nil {
			t.Fatalf("Set(%q) accepted", in)
		}
	}
	if d := pipelineDepth(0); d.String() != "auto" {
		t.Fatalf("0 renders %q", d.String())
	}
}
