package forward

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/zketcd/zketcd/internal/revision"
)

// serviceName is the internal gRPC service. Its methods carry etcd's own
// protobuf messages; the protocol grows by adding methods, never by
// changing one: a peer of an older version answers a method it lacks with
// codes.Unimplemented, which the client reports as engine.ErrNotSent for a
// write sent first and engine.ErrUnsupported for a read (the caller
// answers locally). Methods: one per kind of forwarded write
// (engine.WriteKinds; tag, auth fingerprint and entropy in the request's
// metadata, position and duplicate revision in the response's), and one
// per call beside them (engine.CallKinds; a Positioned call's answer with
// the position it reflects in mdLSN).
const serviceName = "zketcd.internal.Forward"

// Metadata keys of the protocol.
const (
	mdToken   = "zketcd-token"
	mdOrigin  = "zketcd-origin"
	mdAuth    = "zketcd-auth"
	mdLSN     = "zketcd-lsn"
	mdDup     = "zketcd-dup-rev"
	mdOutcome = "zketcd-outcome"
	// mdEntropy carries an auth change's entropy (binary metadata; a
	// leader of this build draws its own instead).
	mdEntropy = "zketcd-entropy-bin"
	// mdAfter carries a re-send's engine.ForwardCall.After (absent on a
	// first send, and from builds before it: a leader then takes a miss
	// of its tag index for an absent tag, as those builds did).
	mdAfter = "zketcd-after"
	// mdCallerToken and mdCallerCN carry the credential of the client a
	// request came from (auth.Caller), for the leader to check it itself.
	mdCallerToken = "zketcd-caller-token"
	// mdCluster names the cluster a call is for, on an endpoint serving
	// many (a fleet's tenants; Client.ForTenant, ServerConfig.Route).
	mdCluster  = "zketcd-cluster"
	mdCallerCN = "zketcd-caller-cn"
	// mdCallerUse carries the forwarding instance's proof that it accepted
	// the caller's token (auth.Caller.Use; absent from older builds).
	mdCallerUse = "zketcd-caller-use"
)

// Values of mdOutcome. outcomeBadToken is any refusal before the request
// ran that its origin may answer by committing it itself: today a request
// without its caller's credential while auth is on (a bad token is refused
// from the headers, without a trailer; older builds sent this outcome for
// it, and their clients read it the same way).
const (
	outcomeNotLeader   = "not-leader"
	outcomeAuthChanged = "auth-changed"
	outcomeFailed      = "failed"
	outcomeBadToken    = "bad-token"
)

func formatTag(t revision.WriterTag) string {
	return strconv.FormatUint(t.Nonce, 16) + "-" + strconv.FormatUint(t.Seq, 16)
}

func parseTag(s string) (revision.WriterTag, error) {
	n, q, ok := strings.Cut(s, "-")
	if !ok {
		return revision.WriterTag{}, fmt.Errorf("bad origin tag %q", s)
	}
	nonce, err1 := strconv.ParseUint(n, 16, 64)
	seq, err2 := strconv.ParseUint(q, 16, 64)
	if err := errors.Join(err1, err2); err != nil {
		return revision.WriterTag{}, fmt.Errorf("bad origin tag %q: %w", s, err)
	}
	return revision.WriterTag{Nonce: nonce, Seq: seq}, nil
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// target turns an advertised URL (http:// or https://host:port) into a
// gRPC target, and tells whether it is https.
func target(url string) (t string, secure bool, err error) {
	rest, ok := strings.CutPrefix(url, "http://")
	if !ok {
		rest, secure = strings.CutPrefix(url, "https://")
	}
	if (!ok && !secure) || rest == "" || strings.Contains(rest, "/") {
		return "", false, fmt.Errorf("internal URL %q: want http:// or https://host:port", url)
	}
	return "dns:///" + rest, secure, nil
}
