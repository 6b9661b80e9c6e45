package zkstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
)

// ACLReport is what the store knows of its root's ACL.
type ACLReport struct {
	// Identity names the configured identity ("digest:alice",
	// "x509:CN=zketcd,O=example", "sasl:zketcd"), "" without one.
	Identity string
	// WorldReadable is set while anyone may read what zketcd keeps under
	// the root: always without an identity (every znode zketcd creates
	// then carries world:anyone, whatever the root's own ACL, and
	// ZooKeeper checks no parent's ACL when a znode is read by its path),
	// and with one while the root or one of its fixed znodes lets
	// world:anyone read (an ACL changed by hand).
	WorldReadable bool
	// ACL is the ACL that makes the root world-readable, as zkCli prints
	// it (digest hashes left out), with where it is; else the root's.
	ACL string
	// Checked is when the root's ACL was read.
	Checked time.Time
}

// ErrACL is wrapped by the errors of an identity ZooKeeper does not
// accept or a root the identity cannot take over.
var ErrACL = errors.New("zookeeper ACL")

// aclCheckInterval is how often a Store reads its root's ACL again, so that
// ACLReport follows a change made by hand.
const aclCheckInterval = time.Minute

// reACLParallel bounds the ZooKeeper calls in flight while re-ACLing.
const reACLParallel = 32

// ACLReport returns the latest report on the root's ACL (Open makes the
// first; it is refreshed every minute).
func (s *Store) ACLReport() ACLReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aclReport
}

// fixedZnodes are the root's znodes that exist from its creation on: the
// start check reads their ACLs besides the root's.
func (l layout) fixedZnodes() []string {
	return []string{l.meta(), l.head(), l.log(), l.members(), l.election(), l.leases(), l.chunks(), l.base(), l.compact(), l.tokens()}
}

// refreshACL judges the root (see ACLReport.WorldReadable) into the
// report: it reads the root's ACL and, with an identity, its fixed
// znodes' ACLs (the other znodes get the identity's ACL when zketcd
// creates them, and Open re-ACLs a root whose fixed znodes differ).
func (s *Store) refreshACL() error {
	acl, _, err := s.conn.GetACL(s.l.root)
	if errors.Is(err, zk.ErrNoAuth) {
		return s.noAccess(s.l.root)
	}
	if err != nil {
		return s.wrap("read the ACL of "+s.l.root, err)
	}
	r := ACLReport{WorldReadable: worldReadable(acl), ACL: describeACL(acl), Checked: time.Now()}
	switch {
	case s.id == nil:
		r.WorldReadable = true
		r.ACL = describeACL(s.acl) + " on every znode this instance creates, as it has no identity (the root's own: " + r.ACL + ")"
	case !r.WorldReadable:
		for _, p := range s.l.fixedZnodes() {
			facl, _, err := s.conn.GetACL(p)
			if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNoAuth) {
				continue // not there, or closed to this session too
			}
			if err != nil {
				return s.wrap("read the ACL of "+p, err)
			}
			if worldReadable(facl) {
				r.WorldReadable, r.ACL = true, describeACL(facl)+" on "+p
				break
			}
		}
	}
	if s.id != nil {
		r.Identity = s.id.String()
	}
	s.mu.Lock()
	prev := s.aclReport
	s.aclReport = r
	s.mu.Unlock()
	if r.WorldReadable && !prev.WorldReadable && !prev.Checked.IsZero() {
		s.log.WithFields(logrus.Fields{"root": s.l.root, "acl": r.ACL}).Warn("the root's ZooKeeper data became world-readable")
	}
	return nil
}

// watchACL refreshes the report until Close.
func (s *Store) watchACL() {
	defer s.wg.Done()
	t := time.NewTicker(aclCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
			if err := s.refreshACL(); err != nil {
				s.log.WithError(err).Debug("read the root's ACL")
			}
		}
	}
}

// ensureRootNode creates the root and its missing parents with the
// identity's ACL.
func (s *Store) ensureRootNode() error {
	for _, p := range parents(s.l.meta()) {
		ok, _, err := s.conn.Exists(p) // needs no permission, unlike create
		if err != nil {
			return s.wrap("stat "+p, err)
		}
		if ok {
			continue
		}
		_, err = s.conn.Create(p, nil, 0, s.acl)
		switch {
		case errors.Is(err, zk.ErrNoAuth):
			return fmt.Errorf("create %s: %w: its parent does not let this session create znodes; create %s (or the parent's ACL) as ZooKeeper's administrator", p, ErrACL, p)
		case err != nil && !errors.Is(err, zk.ErrNodeExists):
			return s.wrap("create "+p, err)
		}
	}
	return nil
}

// probeIdentity proves that ZooKeeper authenticated the session as the
// configured identity before any ACL is set to it (an ACL naming an id
// the session does not have would lock zketcd out): it creates an
// ephemeral znode under the root with the identity's ACL and reads it
// back.
func (s *Store) probeIdentity() error {
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	p := s.l.root + "/aclprobe-" + hex.EncodeToString(nb[:])
	if _, err := s.conn.Create(p, nil, zk.FlagEphemeral, s.acl); err != nil {
		if errors.Is(err, zk.ErrNoAuth) {
			return s.foreignRoot()
		}
		return s.wrap("create "+p, err)
	}
	_, _, err := s.conn.Get(p)
	if derr := s.conn.Delete(p, -1); derr != nil && !errors.Is(derr, zk.ErrNoNode) {
		s.log.WithError(derr).WithField("znode", p).Warn("delete the ACL probe (it is ephemeral: it goes with the session)")
	}
	if errors.Is(err, zk.ErrNoAuth) {
		return fmt.Errorf("%w: ZooKeeper did not authenticate this session as %s (%s): check the credential and ZooKeeper's authProvider settings", ErrACL, s.id, s.identityHint())
	}
	if err != nil {
		return s.wrap("read "+p, err)
	}
	return nil
}

// identityHint says where a scheme's identity comes from.
func (s *Store) identityHint() string {
	switch s.id.scheme {
	case SchemeX509:
		return "the subject of --zk-tls-cert-file, through ZooKeeper's X509AuthenticationProvider on its secureClientPort"
	case SchemeSASL:
		return "SASL DIGEST-MD5 against the JAAS Server section of ZooKeeper"
	}
	return "digest, added with addAuth"
}

// foreignRoot is the error for a root this session may not write to.
func (s *Store) foreignRoot() error {
	acl, _, err := s.conn.GetACL(s.l.root)
	desc := "unreadable"
	if err == nil {
		desc = describeACL(acl)
		if sameACL(acl, s.acl) {
			return fmt.Errorf("%w: ZooKeeper did not authenticate this session as %s (%s)", ErrACL, s.id, s.identityHint())
		}
	}
	return fmt.Errorf("%w: the root %s is ACLed to another identity (%s), not to %s: "+
		"move it with zketcd zk-acl --zk-auth <this identity> --zk-former-auth <that identity>", ErrACL, s.l.root, desc, s.id)
}

// noAccess is the error for a znode of the root this session may not read.
func (s *Store) noAccess(p string) error {
	if s.id != nil {
		return fmt.Errorf("read %s: %w", p, s.foreignRoot())
	}
	return fmt.Errorf("read %s: %w: the root %s is ACLed to an identity and this instance has none: set --zk-auth to it", p, ErrACL, s.l.root)
}

// secureRoot makes every znode of the root carry the identity's ACL: when
// the root's own ACL or that of a fixed znode differs, it re-ACLs the whole
// root (the root last, so that a root with the right ACL is a root whose
// walk completed), then checks again. Without an identity it only reports.
func (s *Store) secureRoot(ctx context.Context) error {
	if err := s.refreshACL(); err != nil {
		return err
	}
	if s.id != nil {
		ok, err := s.rootACLIsIdentity()
		if err != nil {
			return err
		}
		if !ok {
			report := s.ACLReport()
			lg := s.log.WithFields(logrus.Fields{"root": s.l.root, "identity": s.id.String()})
			lg.Warn("the root's znodes are not all ACLed to this instance's identity: re-ACLing every znode of the root")
			n, err := s.ReACL(ctx, func(n int64) { lg.WithField("znodes", n).Info("re-ACL in progress") })
			if err != nil {
				return err
			}
			lg.WithFields(logrus.Fields{"znodes": n, "previous_acl": report.ACL}).Warn("re-ACLed the root")
			if ok, err = s.rootACLIsIdentity(); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("%w: the root %s still has znodes not ACLed to %s after the re-ACL (another instance with another identity writing?)", ErrACL, s.l.root, s.id)
			}
			return s.refreshACL()
		}
	}
	return nil
}

// rootACLIsIdentity reports whether the root and its fixed znodes carry
// exactly the identity's ACL.
func (s *Store) rootACLIsIdentity() (bool, error) {
	for _, p := range append([]string{s.l.root}, s.l.fixedZnodes()...) {
		acl, _, err := s.conn.GetACL(p)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if errors.Is(err, zk.ErrNoAuth) {
			return false, s.foreignRoot()
		}
		if err != nil {
			return false, s.wrap("read the ACL of "+p, err)
		}
		if !sameACL(acl, s.acl) {
			return false, nil
		}
	}
	return true, nil
}

// CheckACL reports whether every znode of the root carries the identity's
// ACL (reading every znode's ACL; the root's fixed znodes alone are what
// Open checks), and how many do not.
func (s *Store) CheckACL(ctx context.Context) (checked, wrong int64, err error) {
	var bad atomic.Int64
	n, err := s.walk(ctx, func(p string) error {
		acl, _, err := s.conn.GetACL(p)
		if errors.Is(err, zk.ErrNoAuth) {
			bad.Add(1)
			return nil
		}
		if err != nil {
			return err
		}
		if !sameACL(acl, s.acl) {
			bad.Add(1)
		}
		return nil
	}, nil)
	return n, bad.Load(), err
}

// ReACL sets the identity's ACL on every znode of the root, the root last,
// after proving the session holds the identity (probeIdentity) and
// leaving the rekey znode, which asks the instances to rotate the auth
// store's token secret (RekeyPending): it was readable under the former
// ACL. progress,
// if not nil, is called every few seconds with the znodes done. Znodes
// deleted meanwhile are skipped. It returns the znodes of the root and
// those created during the walk that it also had to set.
//
// The walk lists a znode's children before it sets the znode's ACL, so a
// child that an instance without the identity (still running on the open
// root) creates in between keeps its open ACL. A second walk, which only
// reads ACLs and sets those that differ, catches them: by then every
// znode but the root is closed, and a session without the identity can
// create nothing below them.
//
// Errors: ErrACL (wrapped) for a znode this session may not change (ACLed
// to an identity it does not hold), the store's unavailability, ctx's.
func (s *Store) ReACL(ctx context.Context, progress func(done int64)) (int64, error) {
	if s.id == nil {
		return 0, fmt.Errorf("%w: no identity to ACL the root to (--zk-auth)", ErrACL)
	}
	if err := s.probeIdentity(); err != nil {
		return 0, err
	}
	// Before anything changes: whatever the root held was readable under
	// its former ACL, and a walk that fails half way is done again.
	if _, err := s.conn.Create(s.l.rekey(), nil, 0, s.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return 0, s.aclErr(s.l.rekey(), err)
	}
	n, err := s.walk(ctx, func(p string) error {
		if p == s.l.root {
			return nil
		}
		_, err := s.conn.SetACL(p, s.acl, -1)
		return err
	}, progress)
	if err != nil {
		return n, err
	}
	var late atomic.Int64
	var again func(int64)
	if progress != nil {
		again = func(done int64) { progress(n + done) }
	}
	if _, err := s.walk(ctx, func(p string) error {
		if p == s.l.root {
			return nil
		}
		acl, _, err := s.conn.GetACL(p)
		if err != nil || sameACL(acl, s.acl) {
			return err
		}
		late.Add(1)
		_, err = s.conn.SetACL(p, s.acl, -1)
		return err
	}, again); err != nil {
		return n + late.Load(), err
	}
	n += late.Load()
	if _, err := s.conn.SetACL(s.l.root, s.acl, -1); err != nil {
		return n, s.aclErr(s.l.root, err)
	}
	return n, s.refreshACL()
}

func (s *Store) aclErr(p string, err error) error {
	if errors.Is(err, zk.ErrNoAuth) {
		return fmt.Errorf("%w: %s: this session may not change its ACL (it is ACLed to an identity the session does not hold): "+
			"give that identity with zketcd zk-acl --zk-former-auth", ErrACL, p)
	}
	return s.wrap("set the ACL of "+p, err)
}

// walk calls fn on every znode of the root (the root included), with up
// to reACLParallel calls in flight, listing each znode's children before
// fn runs on it. A znode deleted meanwhile is skipped. It stops at the
// first error.
func (s *Store) walk(ctx context.Context, fn func(p string) error, progress func(done int64)) (int64, error) {
	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		stack   = []string{s.l.root}
		busy    int
		firstEr error
		done    atomic.Int64
	)
	stopProgress := make(chan struct{})
	var pwg sync.WaitGroup
	if progress != nil {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			t := time.NewTicker(2 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-stopProgress:
					return
				case <-t.C:
					progress(done.Load())
				}
			}
		}()
	}
	visit := func(p string) ([]string, error) {
		children, _, err := s.conn.Children(p)
		if errors.Is(err, zk.ErrNoAuth) {
			children, err = nil, nil // fn decides: a leaf to it
		}
		if s.listed != nil {
			s.listed(p)
		}
		if err == nil {
			err = fn(p)
		}
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return nil, nil
		case err != nil:
			return nil, s.aclErr(p, err)
		}
		done.Add(1)
		out := make([]string, len(children))
		for i, c := range children {
			out[i] = child(p, c)
		}
		return out, nil
	}
	var wg sync.WaitGroup
	for range reACLParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			for {
				for len(stack) == 0 && busy > 0 && firstEr == nil {
					cond.Wait()
				}
				if firstEr != nil || len(stack) == 0 {
					cond.Broadcast()
					return
				}
				p := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				busy++
				mu.Unlock()
				kids, err := visit(p)
				if err == nil {
					err = ctx.Err()
				}
				mu.Lock()
				busy--
				if err != nil && firstEr == nil {
					firstEr = err
				}
				stack = append(stack, kids...)
				cond.Broadcast()
			}
		}()
	}
	wg.Wait()
	close(stopProgress)
	pwg.Wait()
	if progress != nil && firstEr == nil {
		progress(done.Load())
	}
	return done.Load(), firstEr
}

// Identity names the configured identity ("digest:alice"), "" without one.
func (s *Store) Identity() string {
	if s.id == nil {
		return ""
	}
	return s.id.String()
}

// RekeyPending reports whether a re-ACL (ReACL: at the start of an
// instance given an identity, or zketcd zk-acl) asked for the auth
// store's token secret to be rotated, and the re-ACL is complete: the root
// and its fixed znodes carry this store's identity, so a secret drawn now
// is written where only the identity reads it. Without an identity it is
// always false (the root is open). Safe for concurrent use.
func (s *Store) RekeyPending() (bool, error) {
	if s.id == nil {
		return false, nil
	}
	ok, _, err := s.conn.Exists(s.l.rekey())
	if err != nil {
		return false, s.wrap("stat "+s.l.rekey(), err)
	}
	if !ok {
		return false, nil
	}
	return s.rootACLIsIdentity()
}

// RekeyDone removes the rekey znode once the secret was rotated.
func (s *Store) RekeyDone() error {
	if err := s.conn.Delete(s.l.rekey(), -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return s.wrap("delete "+s.l.rekey(), err)
	}
	return nil
}
