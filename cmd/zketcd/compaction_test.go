package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/compactor"
)

func TestAutoCompactionFlagsParseAsEtcd(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want compactor.Config
		err  string
	}{
		{name: "off by default", want: compactor.Config{Mode: compactor.ModePeriodic}},
		{name: "bare number is hours", args: []string{"--auto-compaction-retention=1"},
			want: compactor.Config{Mode: compactor.ModePeriodic, Retention: time.Hour}},
		{name: "duration", args: []string{"--auto-compaction-retention", "30m"},
			want: compactor.Config{Mode: compactor.ModePeriodic, Retention: 30 * time.Minute}},
		{name: "revision count", args: []string{"--auto-compaction-mode=revision", "--auto-compaction-retention=1000"},
			want: compactor.Config{Mode: compactor.ModeRevision, Revisions: 1000}},
		{name: "from the environment", env: map[string]string{
			"ZKETCD_AUTO_COMPACTION_MODE": "revision", "ZKETCD_AUTO_COMPACTION_RETENTION": "50",
		}, want: compactor.Config{Mode: compactor.ModeRevision, Revisions: 50}},
		{name: "unknown mode", args: []string{"--auto-compaction-mode=hourly"}, err: "--auto-compaction-mode/--auto-compaction-retention: unknown auto-compaction-mode"},
		{name: "duration in revision mode", args: []string{"--auto-compaction-mode=revision", "--auto-compaction-retention=1h"}, err: "number of revisions"},
		{name: "not a duration", args: []string{"--auto-compaction-retention=soon"}, err: "want hours or a duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var f serveFlags
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.register(fs, true)
			if err := parseWithEnv(fs, tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.autoCompaction()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("%+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
