package diff_test

import (
	"testing"

	"github.com/zketcd/zketcd/integration/diff"
)

// TestDiffHashKV: after the same write history, zketcd's HashKV (hash,
// compact_revision, hash_revision, errors) equals etcd 3.7.3's at every
// revision the scenarios ask for.
func TestDiffHashKV(t *testing.T) {
	diff.Runner{A: diff.EtcdFactory(), B: zketcdFactory(), KeepGoing: true}.Run(t, diff.HashKVScenarios())
}
