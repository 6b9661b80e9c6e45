package engine

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/revision"
)

// Rotating the token secret after a re-ACL. While a root was open (or
// ACLed to a former identity), whoever could read it may have copied the
// auth store from the log, its simple-token secret with it, and can mint
// tokens from that copy for as long as the secret stays. A re-ACL
// (zkstore.Store.ReACL: at the start of an instance given an identity, or
// zketcd zk-acl) leaves a rekey znode; once the re-ACL is complete, an
// instance that sees it commits a new secret (auth.Rotate, with entropy
// drawn here, as an OpAuth op like any auth change) and removes the znode.
// The starting instance does it before it serves; the leader looks every
// rekeyEvery, for a re-ACL made while it runs or a start that failed to.

// rekeyer is implemented by a Log that records re-ACLs
// (*zkstore.Store; memlog has none).
type rekeyer interface {
	// RekeyPending reports whether a complete re-ACL asks for the
	// secret to be rotated.
	RekeyPending() (bool, error)
	// RekeyDone withdraws the request once the secret was rotated.
	RekeyDone() error
}

// rekeyEvery is how often the leader looks for a rotation asked for.
const rekeyEvery = 5 * time.Second

// rekey rotates the token secret if a re-ACL asked for it, and reports
// whether it did (a disabled auth store has none to rotate: the request is
// withdrawn all the same). Errors: the log's, the commit's (ctx's, or this
// instance may not commit now, e.g. while a leader holds the read lease);
// the request then stays for the next look.
func (b *Engine) rekey(ctx context.Context) (bool, error) {
	r, ok := b.store.(rekeyer)
	if !ok {
		return false, nil
	}
	pending, err := r.RekeyPending()
	if err != nil || !pending {
		return false, err
	}
	entropy := make([]byte, authEntropyBytes)
	if _, err := rand.Read(entropy); err != nil {
		return false, fmt.Errorf("zketcd: token secret entropy: %w", err)
	}
	rotate := auth.Rotate(entropy) // the same bytes on every evaluation
	rotated, err := propose(ctx, b.commit, authEntropyBytes, func(bt *revision.Batch) (bool, error) {
		next, _, err := rotate(bt.AuthState())
		if err != nil || next == nil {
			return false, err
		}
		bt.SetAuthState(next)
		return true, nil
	}, nil)
	if err != nil {
		return false, fmt.Errorf("zketcd: rotate the token secret: %w", err)
	}
	if err := r.RekeyDone(); err != nil {
		return rotated, err
	}
	if rotated {
		b.log.Warn("rotated the auth store's token secret after the root was re-ACLed: tokens signed with the secret it held while it was readable under its former ACL are refused; clients log in again")
	}
	return rotated, nil
}

// rekeyAtStart rotates the token secret before the instance serves, if a
// re-ACL asked for it (typically its own, in zkstore.Open). A failure is
// logged: the leader tries again every rekeyEvery.
func (b *Engine) rekeyAtStart(ctx context.Context) {
	if _, err := b.rekey(ctx); err != nil {
		b.log.WithError(err).Warn("the root was re-ACLed and its token secret is not rotated yet: the leader instance rotates it within seconds")
	}
}

// rekeyLoop lets the leader rotate the token secret when a re-ACL asks
// for it, until the engine stops.
func (b *Engine) rekeyLoop() {
	if _, ok := b.store.(rekeyer); !ok {
		return
	}
	lg := b.log.WithField("component", "rekey")
	t := time.NewTicker(rekeyEvery)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		if leader, _, _ := b.election.State(); !leader {
			continue
		}
		ctx, cancel := context.WithTimeout(b.ctx, rekeyEvery)
		_, err := b.rekey(ctx)
		cancel()
		if err != nil && b.ctx.Err() == nil {
			lg.WithError(err).Warn("rotate the token secret after a re-ACL")
		}
	}
}
