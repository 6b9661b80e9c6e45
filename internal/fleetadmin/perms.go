package fleetadmin

import (
	"bytes"
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/authpb"
)

// roleData is what the registry keeps of a role: its permissions, each a
// key range [Key, RangeEnd) (RangeEnd empty: the key alone; "\x00": every
// key from Key) and a type.
type roleData struct {
	Perms []perm `json:"perms"`
}

type perm struct {
	Type     authpb.Permission_Type `json:"type"`
	Key      []byte                 `json:"key"`
	RangeEnd []byte                 `json:"range_end,omitempty"`
}

func decodeRole(data []byte) (roleData, error) {
	var r roleData
	if len(data) == 0 {
		return r, nil
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return roleData{}, fmt.Errorf("role data %q: %w", data, err)
	}
	return r, nil
}

// decodeRanges reads a tenant record's kept ranges (the same form).
func decodeRanges(data []byte) (roleData, error) { return decodeRole(data) }

func (r roleData) encode() []byte {
	data, _ := json.Marshal(r) // slices of bytes and integers always encode
	return data
}

// grant adds p, or changes the type of the permission on the same range
// (as etcd's RoleGrantPermission does).
func (r *roleData) grant(p perm) {
	for i, q := range r.Perms {
		if bytes.Equal(q.Key, p.Key) && bytes.Equal(q.RangeEnd, p.RangeEnd) {
			r.Perms[i].Type = p.Type
			return
		}
	}
	r.Perms = append(r.Perms, p)
}

// revoke removes the permission on exactly [key, end); false if none.
func (r *roleData) revoke(key, end []byte) bool {
	for i, q := range r.Perms {
		if bytes.Equal(q.Key, key) && bytes.Equal(q.RangeEnd, end) {
			r.Perms = append(r.Perms[:i], r.Perms[i+1:]...)
			return true
		}
	}
	return false
}

func (r roleData) authpb() []*authpb.Permission {
	out := make([]*authpb.Permission, len(r.Perms))
	for i, p := range r.Perms {
		out[i] = &authpb.Permission{PermType: p.Type, Key: p.Key, RangeEnd: p.RangeEnd}
	}
	return out
}

// covers reports whether p allows the request range [key, end) (end as a
// request's range_end: empty for the key alone, "\x00" for every key from
// key) with access write (or read).
func (p perm) covers(key, end []byte, write bool) bool {
	if write && p.Type == authpb.READ || !write && p.Type == authpb.WRITE {
		return false
	}
	if bytes.Compare(key, p.Key) < 0 {
		return false
	}
	switch {
	case len(p.RangeEnd) == 0: // the permission's key alone
		return bytes.Equal(key, p.Key) && len(end) == 0
	case bytes.Equal(p.RangeEnd, []byte{0}): // every key from p.Key
		return true
	case len(end) == 0: // a single key
		return bytes.Compare(key, p.RangeEnd) < 0
	case bytes.Equal(end, []byte{0}): // to the end of the key space
		return false
	default:
		return bytes.Compare(end, p.RangeEnd) <= 0
	}
}
