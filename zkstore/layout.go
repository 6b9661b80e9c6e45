package zkstore

import (
	"encoding/json"
	"fmt"
	"path"
	"strconv"
)

// bucketShift sets how many log entries share a bucket znode (2^14), which
// keeps every getChildren listing small.
const bucketShift = 14

// layout names the znodes under one root.
type layout struct{ root string }

func (l layout) meta() string     { return l.root + "/meta" }
func (l layout) head() string     { return l.root + "/head" }
func (l layout) log() string      { return l.root + "/log" }
func (l layout) members() string  { return l.root + "/members" }
func (l layout) election() string { return l.root + "/election" }
func (l layout) leases() string   { return l.root + "/leases" }

func (l layout) lease(id int64) string {
	return fmt.Sprintf("%s/leases/%016x", l.root, uint64(id))
}

func (l layout) bucket(lsn int64) string {
	return fmt.Sprintf("%s/log/%010d", l.root, lsn>>bucketShift)
}

func (l layout) entry(lsn int64) string {
	return fmt.Sprintf("%s/log/%010d/%020d", l.root, lsn>>bucketShift, lsn)
}

func (l layout) member(id uint64) string {
	return l.members() + "/" + strconv.FormatUint(id, 16)
}

// parents returns every ancestor of p, shortest first ("/a", "/a/b" for "/a/b/c").
func parents(p string) []string {
	var out []string
	for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}

// Meta is the cluster identity, written once with the sentinel entry.
type Meta struct {
	Format    int    `json:"format"`
	ClusterID uint64 `json:"cluster_id"`
}

// Head is the position of the newest log entry.
type Head struct {
	LSN int64 `json:"lsn"`
	Rev int64 `json:"rev"`
	// Zxid is the mzxid of the head znode: the zxid of the commit that
	// wrote entry LSN. Not stored in the data.
	Zxid int64 `json:"-"`
}

// Member is what an instance publishes in its ephemeral member znode.
type Member struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name"`
	ClientURLs []string `json:"client_urls"`
	PeerURLs   []string `json:"peer_urls,omitempty"`
}

func decodeJSON(p string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("znode %s holds data zketcd did not write: %w", p, err)
	}
	return nil
}
