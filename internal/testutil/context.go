package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// Context returns a context that ends after d, or when the test (and its
// cleanups) end: the bound of a test's calls, so that none waits forever.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Logger returns a logger for the code under test that writes only
// entries at level or above (logrus.WarnLevel: warnings and errors) to the
// standard error, as the command would, without the info lines of every
// start and stop.
func Logger(level logrus.Level) *logrus.Entry {
	lg := logrus.New()
	lg.SetLevel(level)
	return logrus.NewEntry(lg)
}
