package auth

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"go.etcd.io/etcd/api/v3/authpb"
	"google.golang.org/protobuf/proto"
)

// Root user and role names, as etcd's.
const (
	RootUser = "root"
	RootRole = "root"
)

// State is the complete auth store at one point of the log. A State is
// immutable once built: changes return a new State sharing what did not
// change, so a State may be read by any number of goroutines.
type State struct {
	// Enabled reports whether authentication is on.
	Enabled bool
	// Revision is etcd's auth revision: 1 on a fresh store, incremented by
	// every change of a user or role and by AuthDisable.
	Revision uint64
	// secret signs simple tokens; chosen at every AuthEnable, so that
	// tokens from before a disable never come back.
	secret []byte
	users  map[string]*authpb.User
	roles  map[string]*authpb.Role
}

// Initial is the state of a fresh store: disabled, auth revision 1, no users
// or roles (etcd's).
func Initial() *State {
	return &State{Revision: 1, users: map[string]*authpb.User{}, roles: map[string]*authpb.Role{}}
}

// User returns the named user, or nil. The result must not be modified.
func (s *State) User(name string) *authpb.User { return s.users[name] }

// Role returns the named role, or nil. The result must not be modified.
func (s *State) Role(name string) *authpb.Role { return s.roles[name] }

// UserNames returns every user name, sorted bytewise (etcd's order).
func (s *State) UserNames() []string { return sortedKeys(s.users) }

// RoleNames returns every role name, sorted bytewise (etcd's order).
func (s *State) RoleNames() []string { return sortedKeys(s.roles) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// clone returns a shallow copy whose maps may be changed.
func (s *State) clone() *State {
	n := &State{Enabled: s.Enabled, Revision: s.Revision, secret: s.secret,
		users: make(map[string]*authpb.User, len(s.users)+1), roles: make(map[string]*authpb.Role, len(s.roles)+1)}
	for k, v := range s.users {
		n.users[k] = v
	}
	for k, v := range s.roles {
		n.roles[k] = v
	}
	return n
}

// Stored form of a State:
//
//	byte    format (stateFormat)
//	byte    enabled (0 or 1)
//	uvarint auth revision
//	bytes   simple-token secret
//	uvarint users; per user: bytes (authpb.User, protobuf)
//	uvarint roles; per role: bytes (authpb.Role, protobuf)
//
// bytes = uvarint length + raw bytes. Users and roles are sorted by name,
// so equal states encode to equal bytes.
const stateFormat = 1

// ErrCorruptState is wrapped by Decode for data that is not a valid State.
var ErrCorruptState = errors.New("corrupt auth state")

// Encode returns the stored form of s.
func (s *State) Encode() []byte {
	b := []byte{stateFormat, 0}
	if s.Enabled {
		b[1] = 1
	}
	b = binary.AppendUvarint(b, s.Revision)
	b = binary.AppendUvarint(b, uint64(len(s.secret)))
	b = append(b, s.secret...)
	b = binary.AppendUvarint(b, uint64(len(s.users)))
	for _, name := range s.UserNames() {
		b = appendMsg(b, s.users[name])
	}
	b = binary.AppendUvarint(b, uint64(len(s.roles)))
	for _, name := range s.RoleNames() {
		b = appendMsg(b, s.roles[name])
	}
	return b
}

func appendMsg(b []byte, m proto.Message) []byte {
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		// Users and roles hold only bytes, strings and booleans.
		panic(fmt.Sprintf("auth: marshal %T: %v", m, err))
	}
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

// Decode parses data written by Encode. Empty data is the initial state (a
// log that never changed auth). Malformed input returns an error wrapping
// ErrCorruptState, never a panic.
func Decode(data []byte) (*State, error) {
	if len(data) == 0 {
		return Initial(), nil
	}
	r := bytes.NewReader(data)
	fail := func(what string) (*State, error) {
		return nil, fmt.Errorf("%w: %s", ErrCorruptState, what)
	}
	if f, _ := r.ReadByte(); f != stateFormat {
		return fail(fmt.Sprintf("unknown format %d", f))
	}
	en, err := r.ReadByte()
	if err != nil || en > 1 {
		return fail("bad enabled flag")
	}
	s := Initial()
	s.Enabled = en == 1
	if s.Revision, err = binary.ReadUvarint(r); err != nil {
		return fail("bad revision")
	}
	if n, err := binary.ReadUvarint(r); err != nil || n > uint64(r.Len()) {
		return fail("bad secret")
	} else if n > 0 {
		s.secret = make([]byte, n)
		_, _ = r.Read(s.secret)
	}
	readMsgs := func(what string, each func([]byte) error) error {
		n, err := binary.ReadUvarint(r)
		if err != nil || n > uint64(r.Len()) {
			return fmt.Errorf("%w: bad %s count", ErrCorruptState, what)
		}
		for i := uint64(0); i < n; i++ {
			l, err := binary.ReadUvarint(r)
			if err != nil || l > uint64(r.Len()) {
				return fmt.Errorf("%w: bad %s length", ErrCorruptState, what)
			}
			buf := make([]byte, l)
			_, _ = r.Read(buf)
			if err := each(buf); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrCorruptState, what, err)
			}
		}
		return nil
	}
	if err := readMsgs("user", func(b []byte) error {
		u := &authpb.User{}
		if err := proto.Unmarshal(b, u); err != nil {
			return err
		}
		s.users[string(u.Name)] = u
		return nil
	}); err != nil {
		return nil, err
	}
	if err := readMsgs("role", func(b []byte) error {
		ro := &authpb.Role{}
		if err := proto.Unmarshal(b, ro); err != nil {
			return err
		}
		s.roles[string(ro.Name)] = ro
		return nil
	}); err != nil {
		return nil, err
	}
	if r.Len() != 0 {
		return fail(fmt.Sprintf("%d trailing bytes", r.Len()))
	}
	return s, nil
}
