package engine

// Lease expiry on a clock the test moves (Config.Now), with the expiry loop
// scanning every few milliseconds: a lease test proves "not before its TTL"
// and "at its TTL" without waiting a TTL of real time.

import (
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/testutil"
)

// fastScan is the expiry loop's period on a fake clock: short enough that a
// test waiting for scans waits little, long enough to leave the loop idle
// most of the time.
const fastScan = 2 * time.Millisecond

// onClock makes an engine's lease expiry run on clk, its expiry loop
// scanning every tick (0: fastScan); configure, if set, applies after.
func onClock(clk *testutil.Clock, tick time.Duration, configure func(*Config)) func(*Config) {
	if tick == 0 {
		tick = fastScan
	}
	return func(c *Config) {
		c.Now, c.expiryTick = clk.Now, tick
		if configure != nil {
			configure(c)
		}
	}
}

// scanned waits until b's expiry loop has done a whole scan that began
// after the call, so it saw every clock reading and lease before the call.
// b must be (or become) the leader.
func scanned(t testing.TB, b *Engine) {
	t.Helper()
	n := b.leases.expiryScans.Load()
	testutil.Eventually(t, 10*time.Second, "an expiry scan of the leader", func() bool { return b.leases.expiryScans.Load() >= n+2 })
}

// expiresNoSoonerThan proves lease id lives until at on clk and expires by
// at+within: it moves clk to just before at, lets the leader b scan and
// checks the lease is there, then moves clk on in steps of a tenth of a
// second, with a scan after each, until the lease expired.
func expiresNoSoonerThan(t testing.TB, b *Engine, st *memlog.Store, clk *testutil.Clock, id int64, at time.Time, within time.Duration) {
	t.Helper()
	if clk.Now().Before(at) {
		clk.AdvanceTo(at.Add(-time.Millisecond))
		scanned(t, b)
		if !st.LeaseTokenExists(id) {
			t.Fatalf("lease %x expired %s before it was due", id, at.Sub(clk.Now()))
		}
		clk.AdvanceTo(at)
	}
	for st.LeaseTokenExists(id) {
		if clk.Now().Sub(at) > within {
			t.Fatalf("lease %x not expired %s after it was due", id, clk.Now().Sub(at))
		}
		scanned(t, b)
		if st.LeaseTokenExists(id) {
			clk.Advance(100 * time.Millisecond)
		}
	}
}

// ttlOf is a lease TTL in seconds as a duration.
func ttlOf(seconds int64) time.Duration { return time.Duration(seconds) * time.Second }
