package zkstore

import (
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
)

// Election elects one leader instance among the members on a root: the
// owner of the lowest ephemeral sequential znode under <root>/election. The
// leader expires leases and compacts; every multi it makes as leader
// includes a check that its election znode still exists (Fence), so a
// deposed leader's writes fail.
//
// An instance stops considering itself leader as soon as its connection
// drops, before its session can expire.
type Election struct {
	s        *Store
	memberID uint64
	relook   time.Duration
	log      *logrus.Entry

	mu       sync.Mutex
	node     string // our znode (full path), "" if none
	session  int64  // session that created node
	leader   bool
	leaderID uint64
	changed  chan struct{}
	// predWatched mirrors whether pred holds a pending watch, for readers
	// other than the loop (tests).
	predWatched bool

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	// yield carries Yield's requests to the loop, each with its answer.
	yield chan chan bool

	// The loop's own watches (only the loop goroutine touches them): the
	// znode it waits on (its predecessor, or its own when leading) and, on
	// a follower further back, the leader's. A pending watch is kept
	// across the periodic re-looks instead of being set again, so a quiet
	// election holds one watch per path, not one per look.
	pred, head armedWatch
}

// armedWatch is a ZooKeeper watch set on path and not yet seen to fire.
type armedWatch struct {
	path string
	ev   <-chan zk.Event
}

// arm returns a pending watch on path: w's own if it is still pending on
// that path, else a new one (ExistsW); exists is false if path is gone.
// A watch that fired (or that an ended session invalidated, which closes
// its channel) is not kept.
func (w *armedWatch) arm(s *Store, path string) (exists bool, err error) {
	if w.ev != nil && w.path == path {
		select {
		case <-w.ev:
		default:
			return true, nil
		}
	}
	w.path, w.ev = "", nil
	ok, _, ev, err := s.conn.ExistsW(path)
	if err != nil || !ok {
		return false, err
	}
	w.path, w.ev = path, ev
	return true, nil
}

// wake is what the loop waits for after a step: an immediate retry, or
// one of the armed watches (nil channels never fire).
type wake struct {
	retry    <-chan time.Time
	pred, hd <-chan zk.Event
}

// Leadership is one instance's part in the election of the leader
// instance, as the engine sees it. Its methods are safe for concurrent use.
type Leadership interface {
	// State reports whether this instance is the leader, the fence to put
	// in leader-only commits, and the member ID of the current leader (0:
	// unknown).
	State() (leader bool, fence Fence, leaderID uint64)
	// Changed returns a channel closed at the next change of State.
	Changed() <-chan struct{}
	// Close withdraws from the election.
	Close()
}

var _ Leadership = (*Election)(nil)

// Campaign starts taking part in the election as memberID. Close the
// returned Election to withdraw.
func (s *Store) Campaign(memberID uint64) Leadership {
	return s.campaign(memberID, electionRelook)
}

// electionRelook is how often the election looks again while no watch
// fires, so the leader a follower reports stays current.
const electionRelook = 5 * time.Second

func (s *Store) campaign(memberID uint64, relook time.Duration) *Election {
	e := &Election{
		s: s, memberID: memberID, relook: relook, log: s.log.WithField("component", "election"),
		changed: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}), yield: make(chan chan bool),
	}
	go e.loop()
	return e
}

// State reports whether this instance is the leader, the fence to put in
// leader-only multis, and the member ID of the current leader (0 unknown).
func (e *Election) State() (leader bool, fence Fence, leaderID uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leader, Fence{path: e.node}, e.leaderID
}

// Changed returns a channel closed at the next change of State.
func (e *Election) Changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

// Yield steps down from the leadership when another member stands in the
// election: this member stops being the leader, deletes its znode (from
// then on a multi fenced by it fails) and stands again behind the others,
// so the next member leads. It reports whether it stepped down; a member
// that does not lead, or leads alone, keeps its place. A fleet spreads its
// tenants' leadership over its instances with it.
func (e *Election) Yield() bool {
	reply := make(chan bool, 1)
	select {
	case e.yield <- reply:
	case <-e.done:
		return false
	}
	select {
	case ok := <-reply:
		return ok
	case <-e.done:
		return false
	}
}

// stepDown is Yield in the loop: only the loop goroutine calls it.
func (e *Election) stepDown(sid int64) bool {
	e.mu.Lock()
	node, nodeSession, leader := e.node, e.session, e.leader
	e.mu.Unlock()
	if !leader || node == "" || nodeSession != sid {
		return false
	}
	names, _, err := e.s.conn.Children(e.s.l.election())
	if err != nil || len(names) < 2 {
		return false
	}
	// Not the leader before the znode goes: nothing this member starts
	// from now on counts on a fence that is about to fail.
	e.set(false, 0)
	if err := e.s.conn.Delete(node, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		e.log.WithError(err).Warn("step down: delete the election znode")
	}
	e.mu.Lock()
	e.node = ""
	e.mu.Unlock()
	e.pred, e.head = armedWatch{}, armedWatch{}
	e.log.Info("stepped down: the next member leads (spreading leadership)")
	return true
}

// Close withdraws from the election (deleting our znode if the session is
// still up) and waits for the loop to end.
func (e *Election) Close() {
	e.closeOnce.Do(func() {
		close(e.stop)
		<-e.done
		e.mu.Lock()
		node := e.node
		e.mu.Unlock()
		if node != "" {
			_ = e.s.conn.Delete(node, -1)
		}
	})
}

func (e *Election) set(leader bool, leaderID uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if leader == e.leader && leaderID == e.leaderID {
		return
	}
	if leader != e.leader {
		if leader {
			e.log.Info("this instance is the leader (lease expiry, compaction)")
		} else {
			e.log.Info("this instance is not the leader")
		}
	}
	e.leader, e.leaderID = leader, leaderID
	close(e.changed)
	e.changed = make(chan struct{})
}

func seqOf(name string) int64 {
	i := strings.LastIndex(name, "n_")
	if i < 0 {
		return -1
	}
	n, err := strconv.ParseInt(name[i+2:], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func (e *Election) loop() {
	defer close(e.done)
	defer e.set(false, 0) // withdrawn: no longer the leader, whatever the znode's fate
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-e.stop:
			return
		default:
		}
		sessCh := e.s.SessionChanged()
		sid, connected := e.s.Session()
		if !connected {
			e.set(false, 0)
			select {
			case <-sessCh:
			case <-e.stop:
				return
			}
			continue
		}
		w, err := e.step(sid)
		if err != nil {
			e.log.WithError(err).Debug("election step")
			e.set(false, 0)
			w = wake{retry: time.After(backoff)}
			backoff = min(2*backoff, 2*time.Second)
		} else {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-w.retry:
		case <-w.pred:
			e.pred = armedWatch{}
			e.publishPred()
		case <-w.hd:
			e.head = armedWatch{}
		case <-sessCh:
		case <-time.After(e.relook):
			// A follower watches only its predecessor; look again now and
			// then so the reported leader stays current.
		case reply := <-e.yield:
			reply <- e.stepDown(sid)
		case <-e.stop:
			return
		}
	}
}

// publishPred records whether pred holds a pending watch (see
// watchesPredecessor). Only the loop goroutine calls it.
func (e *Election) publishPred() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.predWatched = e.pred.ev != nil
}

// watchesPredecessor reports whether the loop holds a pending watch on the
// znode it waits on, as of its last step. Safe for concurrent use.
func (e *Election) watchesPredecessor() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.predWatched
}

// step makes sure we have a znode, finds the leader, and returns what to
// wait for before looking again. Only the loop goroutine calls it.
func (e *Election) step(sid int64) (wake, error) {
	now := wake{retry: time.After(0)}
	e.mu.Lock()
	node, nodeSession := e.node, e.session
	e.mu.Unlock()
	if node == "" || nodeSession != sid {
		data := []byte(strconv.FormatUint(e.memberID, 16))
		p, err := e.s.conn.CreateProtectedEphemeralSequential(e.s.l.electionPrefix(), data, e.s.acl)
		if err != nil {
			return wake{}, e.s.wrap("create election znode", err)
		}
		e.mu.Lock()
		e.node, e.session = p, sid
		e.mu.Unlock()
		node = p
	}
	names, _, err := e.s.conn.Children(e.s.l.election())
	if err != nil {
		return wake{}, e.s.wrap("list election", err)
	}
	sort.Slice(names, func(i, j int) bool { return seqOf(names[i]) < seqOf(names[j]) })
	mine := node[strings.LastIndex(node, "/")+1:]
	idx := -1
	for i, n := range names {
		if n == mine {
			idx = i
		}
	}
	if idx < 0 {
		e.mu.Lock()
		e.node = "" // gone with an expired session: campaign again
		e.mu.Unlock()
		return now, nil
	}
	leaderPath := e.s.l.electionNode(names[0])
	data, _, err := e.s.conn.Get(leaderPath)
	if errors.Is(err, zk.ErrNoNode) {
		return now, nil
	}
	if err != nil {
		return wake{}, e.s.wrap("read leader", err)
	}
	leaderID, _ := strconv.ParseUint(string(data), 16, 64)
	watch := node
	if idx > 0 {
		watch = e.s.l.electionNode(names[idx-1])
	}
	exists, err := e.pred.arm(e.s, watch)
	e.publishPred()
	if err != nil {
		return wake{}, e.s.wrap("watch election", err)
	}
	if !exists {
		return now, nil
	}
	// A follower also watches the leader's znode, so that the leader it
	// reports (where other instances forward their writes) changes as soon
	// as that znode goes, not only when its own predecessor does.
	w := wake{pred: e.pred.ev}
	if idx > 1 {
		ok, err := e.head.arm(e.s, leaderPath)
		if err != nil {
			return wake{}, e.s.wrap("watch election leader", err)
		}
		if !ok {
			return now, nil
		}
		w.hd = e.head.ev
	}
	e.set(idx == 0, leaderID)
	return w, nil
}

// Fence proves leadership inside a multi: it checks that the leader's
// election znode still exists.
type Fence struct{ path string }

// NewFence returns the fence of the election znode at path (for other
// implementations of the log, which name their own election nodes).
func NewFence(path string) Fence { return Fence{path: path} }

// Path is the election znode the fence checks ("" for no fence).
func (f Fence) Path() string { return f.path }

// Valid reports whether the fence names a znode.
func (f Fence) Valid() bool { return f.path != "" }

// Guard returns the fence as a commit precondition.
func (f Fence) Guard() Guard { return Guard{path: f.path, version: -1} }
