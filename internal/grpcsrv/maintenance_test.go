package grpcsrv

import "testing"

// TestStatusDBSizeNeverZero: etcdctl's `endpoint status` table computes
// 100-DbSizeInUse*100/DbSize in integers, so a fresh root (no log entry
// applied yet) must not report a DbSize of 0.
func TestStatusDBSizeNeverZero(t *testing.T) {
	for _, applied := range []int64{0, 1, 334, 1 << 20} {
		size, inUse := statusDBSize(applied), statusDBSize(applied)
		if size <= 0 {
			t.Fatalf("applied %d: DbSize %d", applied, size)
		}
		if applied > 0 && size != applied {
			t.Fatalf("applied %d: DbSize %d, want the applied bytes", applied, size)
		}
		if pct := 100 - inUse*100/size; pct != 0 { // etcdctl's "percentage not in use"
			t.Fatalf("applied %d: %d%% not in use, want 0%%", applied, pct)
		}
	}
}
