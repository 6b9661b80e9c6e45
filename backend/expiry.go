package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/revision"
	"github.com/zketcd/zketcd/translate"
	"github.com/zketcd/zketcd/zkstore"
)

// expiryTick is how often the leader looks for leases past their deadline.
const expiryTick = 250 * time.Millisecond

// leaseDeadline is the leader's view of one lease: when it expires unless
// its token moved past version.
type leaseDeadline struct {
	deadline time.Time // monotonic
	version  int32
	known    bool // version has been read
}

// expireLoop runs lease expiry while this instance is the leader. Deadlines
// use the monotonic clock from when the leader first read each lease's
// token; a lease expires only if its token did not move for a whole TTL
// since, so it never expires early, also across leader changes (a new
// leader starts every lease's clock anew, as etcd does on promotion).
func (b *Backend) expireLoop() {
	defer b.wg.Done()
	lg := b.log.WithField("component", "lease-expiry")
	var deadlines map[int64]*leaseDeadline
	t := time.NewTicker(expiryTick)
	defer t.Stop()
	for {
		changed := b.election.Changed()
		leader, fence, _ := b.election.State()
		if !leader {
			deadlines = nil
			select {
			case <-changed:
			case <-b.ctx.Done():
				return
			}
			continue
		}
		if deadlines == nil {
			deadlines = map[int64]*leaseDeadline{}
		}
		b.expireDue(lg, deadlines, fence)
		select {
		case <-t.C:
		case <-changed:
		case <-b.ctx.Done():
			return
		}
	}
}

func (b *Backend) expireDue(lg *logrus.Entry, deadlines map[int64]*leaseDeadline, fence zkstore.Fence) {
	ttls := b.view.LeaseTTLs()
	for id := range deadlines {
		if _, ok := ttls[id]; !ok {
			delete(deadlines, id)
		}
	}
	for id, ttl := range ttls {
		full := time.Duration(ttl) * time.Second
		d := deadlines[id]
		if d == nil || !d.known {
			// Baseline: the token as it is now. A renewal may have happened
			// up to the moment the read returned, so the clock starts then.
			tok, ok, err := b.store.ReadLeaseToken(id)
			if err != nil {
				lg.WithError(err).Debug("read lease token")
				return
			}
			if !ok {
				continue // revoked meanwhile; the view will catch up
			}
			deadlines[id] = &leaseDeadline{version: tok.Version, known: true, deadline: b.now().Add(full)}
			continue
		}
		if b.now().Before(d.deadline) {
			continue
		}
		tok, ok, err := b.store.ReadLeaseToken(id)
		if err != nil {
			lg.WithError(err).Debug("read lease token")
			return
		}
		if !ok {
			continue
		}
		if tok.Version != d.version {
			// Renewed since the baseline, at the latest just now.
			d.version, d.deadline = tok.Version, b.now().Add(full)
			continue
		}
		if err := b.expire(id, tok.Version, fence); err != nil {
			// Refused: renewed (or leadership lost) while expiring. Take a
			// new baseline, with a whole TTL from then.
			lg.WithError(err).WithField("lease", fmt.Sprintf("%x", id)).Debug("lease expiry not committed")
			d.known = false
			continue
		}
		lg.WithField("lease", fmt.Sprintf("%x", id)).Debug("lease expired")
		b.metrics.leasesExpired.Inc()
		delete(deadlines, id)
	}
}

// expire revokes lease id (deleting its keys in one revision), provided its
// token is still at version and this instance still holds the leadership.
func (b *Backend) expire(id int64, version int32, fence zkstore.Fence) error {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	p := &proposal{
		ctx: ctx, size: 64, done: make(chan struct{}),
		eval: func(bt *revision.Batch) error {
			// Refused under CORRUPT, as etcd's lessor's revocations are.
			if err := translate.AlarmGate(bt.Alarms(), &pb.LeaseRevokeRequest{ID: id}); err != nil {
				return err
			}
			_, err := translate.LeaseRevoke(bt, id)
			return err
		},
		guards: func() []zkstore.Guard {
			return []zkstore.Guard{b.store.LeaseGuard(id, version), fence.Guard()}
		},
	}
	return b.submit(ctx, p)
}
