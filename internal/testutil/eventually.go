// Package testutil holds small helpers the project's tests share: waiting
// for a condition ([Eventually]) and a clock the test moves by hand
// ([Clock]). Its subpackages hold the larger harness pieces (testcerts,
// wallstep).
package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds, and fails the test (t.Fatalf) if it
// does not within the given time, naming what was awaited. cond is first
// called at once, then at intervals growing from 1 ms to 50 ms, so a
// condition that holds soon is seen soon and a long wait costs little CPU.
// Tests wait with it on state they can observe, never with a fixed sleep.
// cond runs on the calling goroutine; Eventually must be called from the
// test's goroutine (it calls t.Fatalf).
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}
