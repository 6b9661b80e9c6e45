package mirror

import (
	"fmt"
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
)

// TestALeaseIsCheckpointedOnlyWhenItHasLessThanItsTTLLeft: the copy of a
// lease records the time it had left at the source only when that is less
// than its granted TTL and more than nothing (a whole TTL, or none left,
// needs no checkpoint: the copy then lives a whole TTL from a leader's
// first look, never less than at the source).
func TestALeaseIsCheckpointedOnlyWhenItHasLessThanItsTTLLeft(t *testing.T) {
	for _, tc := range []struct {
		granted, remaining int64
		want               []revision.Op
	}{
		{60, 25, []revision.Op{{Kind: revision.OpLeaseCheckpoint, Lease: 7, TTL: 25}}},
		{60, 1, []revision.Op{{Kind: revision.OpLeaseCheckpoint, Lease: 7, TTL: 1}}},
		{60, 60, nil},
		{60, 61, nil},
		{60, 0, nil},
		{60, -1, nil},
	} {
		if got := checkpoint(7, tc.granted, tc.remaining); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("granted %d, %d left: %v, want %v", tc.granted, tc.remaining, got, tc.want)
		}
	}
}
