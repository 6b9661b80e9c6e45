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

func TestCommitPipelineFromTheConfigFile(t *testing.T) {
	for yml, want := range map[string]pipelineDepth{"commit-pipeline: auto\n": 0, "commit-pipeline: 4\n": 4, "name: x\n": 0} {
		f, err := parseWithConfig(t, yml)
		if err != nil || f.commitPipeline != want {
			t.Fatalf("%q: commit pipeline %v, %v; want %v", yml, f.commitPipeline, err, want)
		}
	}
	if _, err := parseWithConfig(t, "commit-pipeline: deep\n"); err == nil {
		t.Fatal("commit-pipeline: deep accepted")
	}
}
