// Package testutil holds small helpers the project's tests share: waiting
// for a condition ([Eventually]), a clock the test moves by hand
// ([Clock]), a context bounded by the test ([Context]) and a logger of
// warnings and errors ([Logger]). Its subpackages hold the larger harness
// pieces (an engine's gRPC services on memlog, a root read back, throw-away
// certificates, a clock whose wall reading steps).
package testutil

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// Condition is what [Eventually] waits for: a func() bool that reports
// whether it holds, or a func() error that returns nil once it holds (its
// last error is then part of the failure message).
type Condition interface {
	~func() bool | ~func() error
}

// Eventually polls cond until it holds, and fails the test (t.Fatalf) if it
// does not within the given time, naming what was awaited (and, for a
// func() error, the last error). cond is first called at once, then at
// intervals growing from 1 ms to 50 ms, so a condition that holds soon is
// seen soon and a long wait costs little CPU. Tests wait with it on state
// they can observe, never with a fixed sleep. cond runs on the calling
// goroutine; Eventually must be called from the test's goroutine (it calls
// t.Fatalf).
func Eventually[C Condition](t testing.TB, within time.Duration, what string, cond C) {
	t.Helper()
	var check func() error
	switch c := any(cond).(type) {
	case func() bool:
		check = func() error {
			if c() {
				return nil
			}
			return errNotYet
		}
	case func() error:
		check = c
	default: // a named type with one of those underlying types
		check = convert(cond)
	}
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("not within %s: %s", within, what)
			}
			t.Fatalf("not within %s: %s: %v", within, what, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// errNotYet is a func() bool condition's "does not hold yet".
var errNotYet = errors.New("not yet")

// convert turns a condition of a named func type into a func() error.
func convert[C Condition](cond C) func() error {
	v := reflect.ValueOf(cond)
	return func() error {
		out := v.Call(nil)[0]
		if out.Kind() == reflect.Bool {
			if out.Bool() {
				return nil
			}
			return errNotYet
		}
		if out.IsNil() {
			return nil
		}
		return out.Interface().(error)
	}
}
