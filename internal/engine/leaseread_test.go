package engine

// Lease reads (LeaseTimeToLive, LeaseLeases) at a follower when
// forwarding, on memlog: answered by the leader, whose memory
// holds the keepalives, and locally when it cannot answer.

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func timeToLive(t *testing.T, b *Engine, id int64, keys bool) *pb.LeaseTimeToLiveResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id, Keys: keys})
	if err != nil {
		t.Fatalf("time to live of %x: %v", id, err)
	}
	return resp
}

func leaseIDs(t *testing.T, b *Engine) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.Leases(ctx)
	if err != nil {
		t.Fatalf("leases: %v", err)
	}
	var ids []int64
	for _, l := range resp.Leases {
		ids = append(ids, l.ID)
	}
	return ids
}

// TestLeaseReadsAtAFollowerAreTheLeaders keeps a lease alive through the
// follower (renewed in the leader's memory, its token never moves) past
// several seconds: the follower's TimeToLive is the leader's, not the
// token's decayed estimate, with the keys; its Leases orders by the
// leader's deadlines; a revocation acknowledged before is seen. When the
// leader cannot answer (unreachable, or without the request) the follower
// answers itself.
func TestLeaseReadsAtAFollowerAreTheLeaders(t *testing.T) {
	_, fw, a, _, b, _ := forwardingPair(t)
	const ttl = 10
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kept := grant(t, b, ttl)
	if _, err := b.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: kept}); err != nil {
		t.Fatal(err)
	}
	var idle int64 // granted a second after kept, never renewed
	for start, end := time.Now(), time.Now().Add(4*time.Second); time.Now().Before(end); {
		if idle == 0 && time.Since(start) > time.Second {
			idle = grant(t, b, ttl)
		}
		if got := renew(t, b, kept); got != ttl {
			t.Fatalf("keepalive through the follower answered TTL %d", got)
		}
		// Real time: the follower's own estimate decays by the token's
		// age on the wall clock, which the answer must not show.
		time.Sleep(250 * time.Millisecond)
	}
	if n := counterValue(t, a.metrics.renewalsInMemory); n == 0 {
		t.Fatal("the leader renewed nothing in memory")
	}

	fw.mu.Lock()
	reads := fw.reads
	fw.mu.Unlock()
	lead, follow := timeToLive(t, a, kept, true), timeToLive(t, b, kept, true)
	t.Logf("time to live at the leader %+v, at the follower %+v", lead, follow)
	if follow.TTL < ttl-2 || follow.TTL > lead.TTL || lead.TTL-follow.TTL > 1 || follow.GrantedTTL != ttl || follow.ID != kept {
		t.Fatalf("time to live at the follower: TTL %d of %d, at the leader %d", follow.TTL, follow.GrantedTTL, lead.TTL)
	}
	if len(follow.Keys) != 1 || string(follow.Keys[0]) != "k" {
		t.Fatalf("keys at the follower: %q", follow.Keys)
	}
	if follow.Header == nil || follow.Header.Revision != 0 {
		t.Fatalf("header %v: want it left for the server to fill from the follower's view", follow.Header)
	}
	// The token's estimate, which the follower answered before: decayed by
	// the time kept alive.
	if here, err := b.leaseTimeToLiveHere(ctx, &pb.LeaseTimeToLiveRequest{ID: kept}); err != nil || here.TTL > ttl-4 {
		t.Fatalf("the follower's own estimate: %+v %v; want it decayed (the leader's answer must be what differs)", here, err)
	}
	if got := leaseIDs(t, b); len(got) != 2 || got[0] != idle || got[1] != kept {
		t.Fatalf("leases at the follower %x, want [%x %x]: the kept-alive lease expires last", got, idle, kept)
	}
	fw.mu.Lock()
	reads = fw.reads - reads
	fw.mu.Unlock()
	if reads != 2 {
		t.Fatalf("%d lease reads answered by the leader, want 2", reads)
	}

	// Linearizable: a revocation the leader acknowledged is seen, and the
	// follower's view holds it once it answered.
	if _, err := a.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: idle}); err != nil {
		t.Fatal(err)
	}
	if got := timeToLive(t, b, idle, false); got.TTL != -1 {
		t.Fatalf("time to live of a revoked lease at the follower: %+v", got)
	}
	if b.State().LSN < a.State().LSN {
		t.Fatalf("the follower answered at %d, before the leader's position %d", b.State().LSN, a.State().LSN)
	}
	if got := leaseIDs(t, b); len(got) != 1 || got[0] != kept {
		t.Fatalf("leases at the follower after the revocation: %x", got)
	}

	local := func() float64 {
		return counterValue(t, b.fwd.metrics.requests.WithLabelValues("lease_time_to_live", "local")) +
			counterValue(t, b.fwd.metrics.requests.WithLabelValues("lease_leases", "local"))
	}
	for _, tc := range []struct {
		name string
		cut  func()
	}{
		{"without the request", func() { fw.unsupported = true }},
		{"unreachable", func() { delete(fw.peers, "mem://a") }},
	} {
		fw.mu.Lock()
		tc.cut()
		fw.mu.Unlock()
		before := local()
		if got := timeToLive(t, b, kept, true); got.GrantedTTL != ttl || got.TTL < 0 || len(got.Keys) != 1 {
			t.Fatalf("leader %s: time to live at the follower %+v", tc.name, got)
		}
		if got := leaseIDs(t, b); len(got) != 1 || got[0] != kept {
			t.Fatalf("leader %s: leases at the follower %x", tc.name, got)
		}
		if n := local() - before; n != 2 {
			t.Fatalf("leader %s: %.0f lease reads answered locally, want 2", tc.name, n)
		}
	}
}
