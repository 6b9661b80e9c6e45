package translate

import (
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/revision"
)

func TestLeaseGrantRaisesTTLToTheMinimumAndRefusesTooLarge(t *testing.T) {
	if err := CheckLeaseGrant(&pb.LeaseGrantRequest{TTL: MaxLeaseTTL + 1}); !errors.Is(err, rpctypes.ErrGRPCLeaseTTLTooLarge) {
		t.Fatalf("TTL above the maximum: %v", err)
	}
	_ = newStore(t).Read(func(r revision.Reader) error {
		bt := revision.NewBatch(r)
		bt.Begin()
		resp, err := LeaseGrant(bt, &pb.LeaseGrantRequest{TTL: 1}, 7)
		if err != nil || resp.TTL != MinLeaseTTL || resp.ID != 7 {
			t.Fatalf("grant: %v %v", resp, err)
		}
		if _, err := LeaseGrant(bt, &pb.LeaseGrantRequest{TTL: 5}, 7); !errors.Is(err, rpctypes.ErrGRPCLeaseExist) {
			t.Fatalf("second grant of 7: %v", err)
		}
		if _, err := LeaseRevoke(bt, 8); !errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) {
			t.Fatalf("revoke of a missing lease: %v", err)
		}
		return nil
	})
}

func TestRemainingTTLIsTruncatedAndBounded(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		granted int64
		ago     time.Duration
		want    int64
	}{
		{10, 1500 * time.Millisecond, 8}, // 8.5 s left: truncated
		{10, 0, 10},
		{10, -time.Second, 10}, // a clock ahead of ours: never above the grant
		{10, 11 * time.Second, 0},
	} {
		if got := RemainingTTL(c.granted, now.Add(-c.ago), now); got != c.want {
			t.Errorf("granted %d, renewed %s ago: %d, want %d", c.granted, c.ago, got, c.want)
		}
	}
}

func TestLeaseLeasesSoonestExpiryFirstTiesByID(t *testing.T) {
	now := time.Now()
	resp := LeaseLeases([]LeaseExpiry{{3, now.Add(time.Second)}, {2, now}, {1, now.Add(time.Second)}})
	var ids []int64
	for _, l := range resp.Leases {
		ids = append(ids, l.ID)
	}
	if len(ids) != 3 || ids[0] != 2 || ids[1] != 1 || ids[2] != 3 {
		t.Fatalf("order %v, want [2 1 3]", ids)
	}
}
