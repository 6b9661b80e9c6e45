package zkserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// ErrNoLeader is returned (wrapped) by [Ensemble.Leader] when no member
// reports being the leader.
var ErrNoLeader = errors.New("no leader")

// Ensemble is a ZooKeeper ensemble of n quorum members (myid 1..n), each a
// [Server] with its own directory (member-<myid> under Options.Dir) and its
// own client, quorum and election ports on 127.0.0.1. Members are addressed
// by their 0-based index; member i has myid i+1.
//
// All methods are safe for concurrent use. Individual members are
// controlled through [Ensemble.Member].
type Ensemble struct {
	members []*Server
	opts    Options
	log     *logrus.Entry
}

// StartEnsemble writes the configuration of n members under opts.Dir,
// starts them all as child processes and waits until they have formed a
// quorum: one leader and n-1 followers (for n == 1, a server in standalone
// mode), bounded by ctx and opts.StartTimeout. Ports are picked from
// opts.Ports; when opts.ClientPort is not 0, member i uses ClientPort+i as
// its client port. When a picked port turns out to be taken, it retries
// with new ports.
//
// On error no process is left running and the error includes the log tails
// of the members. A missing java or jar yields an error wrapping
// [ErrPrerequisites].
func StartEnsemble(ctx context.Context, n int, opts Options) (*Ensemble, error) {
	if n < 1 {
		return nil, fmt.Errorf("zkserver: ensemble of %d members", n)
	}
	o, err := prepared(opts)
	if err != nil {
		return nil, err
	}
	if err := o.preflight(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("zkserver: create ensemble dir: %w", err)
	}
	const attempts = 3
	for attempt := 1; ; attempt++ {
		e, err := startEnsembleOnce(ctx, n, o)
		if err == nil {
			return e, nil
		}
		if errors.Is(err, ErrAddrInUse) && attempt < attempts && ctx.Err() == nil {
			o.Logger.WithError(err).Warn("ensemble port taken, retrying with other ports")
			continue
		}
		return nil, fmt.Errorf("zkserver: start ensemble of %d in %s: %w", n, o.Dir, err)
	}
}

func startEnsembleOnce(ctx context.Context, n int, o Options) (*Ensemble, error) {
	start := time.Now()
	want := 2 * n
	if o.ClientPort == 0 {
		want = 3 * n
	}
	ports, err := o.Ports.PickN(want)
	if err != nil {
		return nil, err
	}
	peers := make([]quorumPeer, n)
	clientPorts := make([]int, n)
	for i := range n {
		peers[i] = quorumPeer{id: i + 1, quorumPort: ports[2*i], elecPort: ports[2*i+1]}
		if o.ClientPort == 0 {
			clientPorts[i] = ports[2*n+i]
		} else {
			clientPorts[i] = o.ClientPort + i
			o.Ports.Reserve(clientPorts[i])
		}
	}
	e := &Ensemble{opts: o, log: o.Logger.WithField("ensemble", o.Dir)}
	for i := range n {
		mo := o
		mo.Dir = filepath.Join(o.Dir, "member-"+strconv.Itoa(i+1))
		view, err := routedPeers(i+1, peers, o.RoutePeer)
		if err != nil {
			return nil, err
		}
		e.members = append(e.members, newServer(mo, i+1, clientPorts[i], view, quorumMain))
	}
	for _, m := range e.members {
		if err := m.Launch(); err != nil {
			_ = e.Kill()
			return nil, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	if err := e.WaitQuorum(wctx); err != nil {
		tails := e.logTails(25)
		_ = e.Kill()
		if strings.Contains(tails, "Address already in use") {
			err = fmt.Errorf("%w: %w", ErrAddrInUse, err)
		}
		return nil, fmt.Errorf("%w\n%s", err, tails)
	}
	e.log.WithFields(logrus.Fields{"members": n, "connect": e.ConnectString(), "took": time.Since(start).Round(time.Millisecond)}).Info("ZooKeeper ensemble has a quorum")
	return e, nil
}

// logTails returns the last lines of every member's current run.
func (e *Ensemble) logTails(lines int) string {
	var b strings.Builder
	for _, m := range e.members {
		p, _ := m.current()
		var off int64
		if p != nil {
			off = p.logOffset
		}
		fmt.Fprintf(&b, "--- tail of %s ---\n%s\n", m.LogPath(), readLogTail(m.LogPath(), off, 4<<10, lines))
	}
	return b.String()
}

// Size returns the number of members.
func (e *Ensemble) Size() int { return len(e.members) }

// Member returns member i (0-based; its myid is i+1). It panics if i is out
// of range.
func (e *Ensemble) Member(i int) *Server { return e.members[i] }

// Members returns all members in index order, in a new slice.
func (e *Ensemble) Members() []*Server { return append([]*Server(nil), e.members...) }

// Addrs returns the client addresses of all members in index order, in a
// new slice. They do not change across restarts.
func (e *Ensemble) Addrs() []string {
	addrs := make([]string, len(e.members))
	for i, m := range e.members {
		addrs[i] = m.Addr()
	}
	return addrs
}

// ConnectString returns the comma-joined client addresses, as ZooKeeper
// clients expect them.
func (e *Ensemble) ConnectString() string { return strings.Join(e.Addrs(), ",") }

// memberModes asks every running, unpaused member for its mode
// concurrently. modes[i] is "" and errs[i] is nil for members skipped.
func (e *Ensemble) memberModes(ctx context.Context) (modes []string, errs []error) {
	modes = make([]string, len(e.members))
	errs = make([]error, len(e.members))
	var wg sync.WaitGroup
	for i, m := range e.members {
		if !m.Running() || m.Paused() {
			continue
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			modes[i], errs[i] = m.Mode(pctx)
		})
	}
	wg.Wait()
	return modes, errs
}

// Leader returns the index of the member that reports being the leader (for
// a one-member ensemble, the member in standalone mode). Stopped and paused
// members are not asked. It fails with an error wrapping [ErrNoLeader] when
// no member is the leader, for example during an election, and with another
// error when several members claim leadership. It does not wait; poll it or
// use [Ensemble.WaitQuorum] to wait for an election.
func (e *Ensemble) Leader(ctx context.Context) (int, error) {
	modes, errs := e.memberModes(ctx)
	var leaders []int
	for i, mode := range modes {
		if mode == ModeLeader || mode == ModeStandalone {
			leaders = append(leaders, i)
		}
	}
	switch len(leaders) {
	case 1:
		return leaders[0], nil
	case 0:
		return -1, fmt.Errorf("zkserver: %w: %s", ErrNoLeader, describeModes(modes, errs))
	default:
		return -1, fmt.Errorf("zkserver: member indexes %v all claim leadership: %s", leaders, describeModes(modes, errs))
	}
}

func describeModes(modes []string, errs []error) string {
	parts := make([]string, len(modes))
	for i := range modes {
		switch {
		case errs[i] != nil:
			parts[i] = fmt.Sprintf("member index %d: %v", i, errs[i])
		case modes[i] == "":
			parts[i] = fmt.Sprintf("member index %d: not running or paused", i)
		default:
			parts[i] = fmt.Sprintf("member index %d: %s", i, modes[i])
		}
	}
	return strings.Join(parts, "; ")
}

// WaitQuorum waits, bounded by ctx only, until exactly one member is the
// leader and every other running, unpaused member serves as a follower or
// observer. Stopped and paused members are not waited for, so after killing
// a member it waits for the survivors' new election. It fails early, with
// the member's log tail, if a member that was running when WaitQuorum was
// called exits other than through Stop or Kill.
func (e *Ensemble) WaitQuorum(ctx context.Context) error {
	procs := make([]*process, len(e.members))
	for i, m := range e.members {
		procs[i], _ = m.current()
	}
	ticker := time.NewTicker(pollInterval * 2)
	defer ticker.Stop()
	start := time.Now()
	for {
		for i, p := range procs {
			if p != nil && p.exited() && !p.expected.Load() {
				return e.members[i].startError(p, fmt.Errorf("%w (%v)", ErrExited, p.waitErr))
			}
		}
		modes, errs := e.memberModes(ctx)
		leaders, serving, asked := 0, 0, 0
		for i, mode := range modes {
			if mode == "" && errs[i] == nil {
				continue // stopped or paused
			}
			asked++
			switch mode {
			case ModeLeader, ModeStandalone:
				leaders++
				serving++
			case ModeFollower, ModeObserver:
				serving++
			}
		}
		if leaders == 1 && serving == asked {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("zkserver: no quorum after %s: %w (%s)", time.Since(start).Round(time.Millisecond), ctx.Err(), describeModes(modes, errs))
		case <-ticker.C:
		}
	}
}

// Start launches every member that is not running, on its old directory and
// ports, and waits for a quorum as [Ensemble.WaitQuorum] does, bounded by
// ctx and Options.StartTimeout. Unlike calling [Server.Start] member by
// member, this also works when the ensemble has lost its quorum. Members
// that fail to serve are not stopped.
func (e *Ensemble) Start(ctx context.Context) error {
	for _, m := range e.members {
		if err := m.Launch(); err != nil && !errors.Is(err, ErrRunning) {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, e.opts.StartTimeout)
	defer cancel()
	return e.WaitQuorum(ctx)
}

// Stop stops all members concurrently as [Server.Stop] does and returns
// when all are gone; the errors of all members are joined. Stopping an
// ensemble twice is a no-op.
func (e *Ensemble) Stop() error {
	return e.each((*Server).Stop)
}

// Kill kills all members concurrently as [Server.Kill] does.
func (e *Ensemble) Kill() error {
	return e.each((*Server).Kill)
}

func (e *Ensemble) each(f func(*Server) error) error {
	errs := make([]error, len(e.members))
	var wg sync.WaitGroup
	for i, m := range e.members {
		wg.Go(func() { errs[i] = f(m) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
