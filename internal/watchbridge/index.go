package watchbridge

import (
	"bytes"
	"math/rand/v2"
)

// rangeIndex holds range watchers ([key, end), end empty: no upper bound)
// in an interval tree: a treap ordered by start key, each node keeping the
// largest end in its subtree. Finding the watchers whose range holds a key
// costs O(log W) per match plus O(log W) (expected), instead of a scan of
// every range watcher; adding and removing one costs O(log W). Not safe for
// concurrent use (the hub's lock guards it).
type rangeIndex struct {
	root  *rnode
	nodes map[*watcher]*rnode
	seq   uint64 // orders watchers with equal start keys
}

type rnode struct {
	w           *watcher
	seq, prio   uint64
	left, right *rnode
	// maxEnd is the largest end in the subtree; maxInf: some end is
	// unbounded.
	maxEnd []byte
	maxInf bool
}

func newRangeIndex() rangeIndex { return rangeIndex{nodes: map[*watcher]*rnode{}} }

func (x *rangeIndex) len() int { return len(x.nodes) }

func (x *rangeIndex) has(w *watcher) bool {
	_, ok := x.nodes[w]
	return ok
}

// add inserts w, which must not be in the index.
func (x *rangeIndex) add(w *watcher) {
	x.seq++
	n := &rnode{w: w, seq: x.seq, prio: rand.Uint64()}
	n.fix()
	x.nodes[w] = n
	l, r := split(x.root, w.key, n.seq)
	x.root = merge(merge(l, n), r)
}

// remove deletes w and reports whether it was in the index.
func (x *rangeIndex) remove(w *watcher) bool {
	n, ok := x.nodes[w]
	if !ok {
		return false
	}
	delete(x.nodes, w)
	l, r := split(x.root, w.key, n.seq)
	_, r = split(r, w.key, n.seq+1)
	x.root = merge(l, r)
	return true
}

// each calls fn for every watcher, in no particular order.
func (x *rangeIndex) each(fn func(*watcher)) {
	for w := range x.nodes {
		fn(w)
	}
}

// stab calls fn for every watcher whose range holds key.
func (x *rangeIndex) stab(key []byte, fn func(*watcher)) { stab(x.root, key, fn) }

func stab(n *rnode, key []byte, fn func(*watcher)) {
	for n != nil && endAbove(n.maxEnd, n.maxInf, key) {
		stab(n.left, key, fn)
		if bytes.Compare(n.w.key, key) > 0 {
			return // this node and its right subtree start after key
		}
		if e, inf := endOf(n.w); endAbove(e, inf, key) {
			fn(n.w)
		}
		n = n.right
	}
}

// endOf returns w's end, or inf for a range without an upper bound.
func endOf(w *watcher) (end []byte, inf bool) { return w.end, len(w.end) == 0 }

// endAbove reports whether an end (inf: unbounded) lies above key.
func endAbove(end []byte, inf bool, key []byte) bool {
	return inf || bytes.Compare(key, end) < 0
}

func (n *rnode) fix() {
	n.maxEnd, n.maxInf = endOf(n.w)
	for _, c := range [2]*rnode{n.left, n.right} {
		if c == nil || n.maxInf {
			continue
		}
		if c.maxInf || bytes.Compare(c.maxEnd, n.maxEnd) > 0 {
			n.maxEnd, n.maxInf = c.maxEnd, c.maxInf
		}
	}
}

// before reports whether n orders before (key, seq).
func (n *rnode) before(key []byte, seq uint64) bool {
	c := bytes.Compare(n.w.key, key)
	return c < 0 || (c == 0 && n.seq < seq)
}

// split divides t into the nodes before (key, seq) and the others.
func split(t *rnode, key []byte, seq uint64) (l, r *rnode) {
	if t == nil {
		return nil, nil
	}
	if t.before(key, seq) {
		t.right, r = split(t.right, key, seq)
		t.fix()
		return t, r
	}
	l, t.left = split(t.left, key, seq)
	t.fix()
	return l, t
}

// merge joins l and r, every node of l ordering before every node of r.
func merge(l, r *rnode) *rnode {
	switch {
	case l == nil:
		return r
	case r == nil:
		return l
	case l.prio > r.prio:
		l.right = merge(l.right, r)
		l.fix()
		return l
	default:
		r.left = merge(l, r.left)
		r.fix()
		return r
	}
}
