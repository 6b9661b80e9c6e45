package auth

import (
	"bytes"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/authpb"
)

// interval is a half-open key interval [begin, end); an empty end is
// unbounded (after every key), as in etcd's interval comparisons, where an
// empty key sorts after every other.
type interval struct{ begin, end []byte }

// cmpKey compares keys with the empty key after every other.
func cmpKey(a, b []byte) int {
	switch {
	case len(a) == 0 && len(b) == 0:
		return 0
	case len(a) == 0:
		return 1
	case len(b) == 0:
		return -1
	}
	return bytes.Compare(a, b)
}

// point is the interval of one key: [key, key+"\x00").
func point(key []byte) interval {
	return interval{begin: key, end: append(slices.Clip(key), 0)}
}

// userPerms are one user's merged read and write intervals, sorted by begin.
type userPerms struct {
	read, write []interval
	root        bool
}

// permsOf merges the permissions of every role of u, as etcd does: a
// permission with an empty range end is one key, range end "\x00" is
// every key from Key on.
func permsOf(s *State, u *authpb.User) *userPerms {
	up := &userPerms{}
	for _, name := range u.Roles {
		if name == RootRole {
			up.root = true
		}
		ro := s.roles[name]
		if ro == nil {
			continue
		}
		for _, p := range ro.KeyPermission {
			var iv interval
			switch {
			case len(p.RangeEnd) == 0:
				iv = point(p.Key)
			case isOpenEnded(p.RangeEnd):
				iv = interval{begin: p.Key}
			default:
				iv = interval{begin: p.Key, end: p.RangeEnd}
			}
			switch p.PermType {
			case authpb.Permission_READWRITE:
				up.read = append(up.read, iv)
				up.write = append(up.write, iv)
			case authpb.Permission_READ:
				up.read = append(up.read, iv)
			case authpb.Permission_WRITE:
				up.write = append(up.write, iv)
			}
		}
	}
	byBegin := func(a, b interval) int { return cmpKey(a.begin, b.begin) }
	slices.SortStableFunc(up.read, byBegin)
	slices.SortStableFunc(up.write, byBegin)
	return up
}

// covers reports whether the union of ivs (sorted by begin) contains q
// without a gap, as etcd's interval tree Contains: only the intervals that
// overlap q count, and they must be contiguous from at or before q.begin to
// at or after q.end.
func covers(ivs []interval, q interval) bool {
	var minBegin, maxEnd []byte
	seen := false
	for _, iv := range ivs {
		// Overlap of half-open intervals: iv.begin < q.end && q.begin < iv.end.
		if cmpKey(iv.begin, q.end) >= 0 || cmpKey(q.begin, iv.end) >= 0 {
			continue
		}
		if !seen {
			minBegin, maxEnd, seen = iv.begin, iv.end, true
			continue
		}
		if cmpKey(maxEnd, iv.begin) < 0 {
			return false
		}
		if cmpKey(iv.end, maxEnd) > 0 {
			maxEnd = iv.end
		}
	}
	return seen && cmpKey(maxEnd, q.end) >= 0 && cmpKey(minBegin, q.begin) <= 0
}

// Perms answers permission checks against one State, computing each user's
// merged intervals once. Safe for concurrent use.
type Perms struct {
	state *State
	mu    sync.Mutex
	users map[string]*userPerms
}

// NewPerms returns the permission checker of s.
func NewPerms(s *State) *Perms { return &Perms{state: s, users: map[string]*userPerms{}} }

func (p *Perms) of(user string) *userPerms {
	p.mu.Lock()
	defer p.mu.Unlock()
	if up, ok := p.users[user]; ok {
		return up
	}
	var up *userPerms
	if u := p.state.users[user]; u != nil {
		up = permsOf(p.state, u)
	}
	p.users[user] = up
	return up
}

// Permitted reports whether user may perform an operation of kind typ
// (READ or WRITE) on [key, end): end empty is the single key, end "\x00"
// every key from key on. The root role may do everything; an unknown user
// nothing.
func (p *Perms) Permitted(user string, key, end []byte, typ authpb.Permission_Type) bool {
	up := p.of(user)
	if up == nil {
		return false
	}
	if up.root {
		return true
	}
	ivs := up.read
	if typ == authpb.Permission_WRITE {
		ivs = up.write
	}
	if len(end) == 0 {
		pt := point(key)
		for _, iv := range ivs {
			if cmpKey(iv.begin, pt.end) < 0 && cmpKey(pt.begin, iv.end) < 0 {
				return true
			}
		}
		return false
	}
	q := interval{begin: key, end: end}
	if isOpenEnded(end) {
		q.end = nil
	}
	return covers(ivs, q)
}
