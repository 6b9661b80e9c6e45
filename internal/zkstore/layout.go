package zkstore

import (
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/zketcd/zketcd/internal/revision"
)

// bucketShift sets how many log entries share a bucket znode (2^14), which
// keeps every getChildren listing small.
const bucketShift = 14

// layout names every znode zketcd uses under one root; no other file
// builds a path:
//
//	<root>/meta                     cluster identity (Meta, JSON)
//	<root>/head                     {lsn, rev} of the newest entry (Head, JSON)
//	<root>/log/<bucket>/<lsn>       log entry lsn; bucket = lsn >> 14
//	<root>/chunks/<lsn>-<nonce>-<seq>-<i>  parts of an entry above the budget
//	<root>/tokens/<nonce>-m         a writer's ephemeral pipeline marker (older
//	                                versions: ephemeral <nonce>-<seq> tokens)
//	<root>/leases/<id>              lease renewal tokens (data version = renewals)
//	<root>/members/<id>             ephemeral member znodes (Member, JSON)
//	<root>/election/n_<seq>         ephemeral sequential election znodes
//	<root>/readlease                ephemeral: the leader serves reads from memory (--read-lease)
//	<root>/rekey                    left by a re-ACL until the token secret is rotated
//	<root>/compact                  the current base generation (Base, JSON)
//	<root>/base/<lsn>-<nonce>-<n>/<i>  chunks of a base generation's snapshot (attempt n)
type layout struct{ root string }

func (l layout) meta() string      { return l.root + "/meta" }
func (l layout) head() string      { return l.root + "/head" }
func (l layout) log() string       { return l.root + "/log" }
func (l layout) members() string   { return l.root + "/members" }
func (l layout) election() string  { return l.root + "/election" }
func (l layout) leases() string    { return l.root + "/leases" }
func (l layout) readLease() string { return l.root + "/readlease" }

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
	// InternalURL is the instance's internal endpoint (write forwarding
	// and ReadIndex), and InternalToken the secret a caller presents to
	// it; both empty in member znodes of instances that serve none.
	InternalURL   string `json:"internal_url,omitempty"`
	InternalToken string `json:"internal_token,omitempty"`
	// Host identifies the host (and network namespace) the instance runs
	// on, so that an InternalURL on loopback is dialed only from there
	// ("": not told, by builds before it).
	Host string `json:"host,omitempty"`
	// HashRequest asks every other member for its HashKV at a revision
	// (the corruption check: the leader's periodic one, or a starting
	// instance's initial one); HashAnswers are this member's answers to
	// the latest requests it saw (at most MaxHashAnswers, newest last).
	// Builds without the check ignore both.
	HashRequest *HashRequest `json:"hash_request,omitempty"`
	HashAnswers []HashAnswer `json:"hash_answers,omitempty"`
	// ReadsFormat is the newest root format the member's build reads
	// (MetaFormat; set when the member is published). Builds before root
	// format 2 leave it out (0): while such a member is live, the root's
	// format is not raised.
	ReadsFormat int `json:"reads_format,omitempty"`
}

// MaxHashAnswers bounds Member.HashAnswers.
const MaxHashAnswers = 4

// HashRequest is one round of the corruption check.
type HashRequest struct {
	Check uint64 `json:"check"` // distinguishes rounds
	Rev   int64  `json:"rev"`
}

// HashAnswer is a member's etcd HashKV at the request's revision.
type HashAnswer struct {
	Check      uint64 `json:"check"`
	Rev        int64  `json:"rev"`
	CompactRev int64  `json:"compact_rev"`
	Hash       uint32 `json:"hash"`
	// Err is set instead of a hash when the member could not compute it
	// (the revision compacted away meanwhile).
	Err string `json:"err,omitempty"`
}

func decodeJSON(p string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("znode %s holds data zketcd did not write: %w", p, err)
	}
	return nil
}

func (l layout) compact() string { return l.root + "/compact" }

func (l layout) base() string { return l.root + "/base" }

// chunkName names chunk i of the entry a writer intends for log position lsn.
func chunkName(lsn int64, w revision.WriterTag, i int) string {
	return fmt.Sprintf("%020d-%016x-%d-%d", lsn, w.Nonce, w.Seq, i)
}

// parseChunkName returns the log position a chunk was written for.
func parseChunkName(name string) (lsn int64, ok bool) {
	first, _, found := strings.Cut(name, "-")
	if !found {
		return 0, false
	}
	n, err := strconv.ParseInt(first, 10, 64)
	return n, err == nil
}

func (l layout) chunks() string { return l.root + "/chunks" }

func (l layout) chunk(name string) string { return l.root + "/chunks/" + name }

func (l layout) tokens() string { return l.root + "/tokens" }

// rekey is the znode a re-ACL leaves for the instances (see
// Store.RekeyPending): what the root held was readable under another ACL,
// the auth store's token secret among it.
func (l layout) rekey() string { return l.root + "/rekey" }

func (l layout) token(name string) string { return l.root + "/tokens/" + name }

// generation names a new base generation's znode for a snapshot at lsn,
// written by nonce's writer in its attempt-th try (see freshGeneration).
func (l layout) generation(lsn int64, nonce, attempt uint64) string {
	return fmt.Sprintf("%s/%020d-%016x-%d", l.base(), lsn, nonce, attempt)
}

// baseChunk names chunk i of the base generation at path gen.
func baseChunk(gen string, i int) string { return fmt.Sprintf("%s/%06d", gen, i) }

// electionPrefix is the path election znodes are created with (ZooKeeper
// appends the sequence number).
func (l layout) electionPrefix() string { return l.election() + "/n_" }

// electionNode names the election znode called name.
func (l layout) electionNode(name string) string { return l.election() + "/" + name }

// child names the child called name of the znode at dir (for names read
// from a listing).
func child(dir, name string) string { return dir + "/" + name }
