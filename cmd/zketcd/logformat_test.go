package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// TestLogPrintsDurationsReadablyInBothFormats: a duration field reads as
// etcd's logs print one ("took":"1.2ms"), in JSON as in text, and the
// other fields keep their types.
func TestLogPrintsDurationsReadablyInBothFormats(t *testing.T) {
	for _, tc := range []struct {
		format string
		want   []string
	}{
		{"json", []string{`"took":"1.2ms"`, `"window":"2m30s"`, `"lsn":42`, `"error":"boom"`}},
		{"text", []string{"took=1.2ms", "window=2m30s", "lsn=42", "error=boom"}},
	} {
		t.Run(tc.format, func(t *testing.T) {
			var out bytes.Buffer
			f := serveFlags{logLevel: "info", logFormat: tc.format, logOutput: &out}
			lg, err := f.logger()
			if err != nil {
				t.Fatal(err)
			}
			lg.WithFields(logrus.Fields{"took": 1200 * time.Microsecond, "window": 150 * time.Second, "lsn": 42}).
				WithError(errors.New("boom")).Info("applied")
			line := out.String()
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("%s log lacks %s: %s", tc.format, w, line)
				}
			}
			if tc.format == "json" {
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("not JSON: %v: %s", err, line)
				}
			}
		})
	}
}

// TestLogDurationFormatLeavesTheEntryAlone: formatting does not change the
// entry's fields (other hooks and formatters see the durations as they
// were logged).
func TestLogDurationFormatLeavesTheEntryAlone(t *testing.T) {
	f := serveFlags{logLevel: "info", logFormat: "json", logOutput: &bytes.Buffer{}}
	lg, err := f.logger()
	if err != nil {
		t.Fatal(err)
	}
	e := lg.WithField("took", time.Second)
	e.Info("one")
	if d, ok := e.Data["took"].(time.Duration); !ok || d != time.Second {
		t.Fatalf("the entry's field became %#v", e.Data["took"])
	}
}
