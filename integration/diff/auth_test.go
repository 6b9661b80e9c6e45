package diff_test

import (
	"testing"

	"github.com/zketcd/zketcd/integration/diff"
)

// TestDiffAuthOff compares the Auth service with authentication disabled.
func TestDiffAuthOff(t *testing.T) {
	diff.Runner{A: diff.EtcdFactory(), B: zketcdFactory(), KeepGoing: true}.Run(t, diff.AuthOffScenarios())
}

// TestDiffAuthOn compares every RPC with authentication enabled, as a
// permitted and a forbidden user.
func TestDiffAuthOn(t *testing.T) {
	diff.Runner{A: diff.EtcdFactory(), B: zketcdFactory(), KeepGoing: true}.Run(t, diff.AuthOnScenarios())
}
