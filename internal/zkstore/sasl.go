package zkstore

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
)

// SASL DIGEST-MD5 (RFC 2831) as ZooKeeper's servers run it: go-zookeeper
// has no SASL, so zkstore wraps the connections it dials. ZooKeeper's
// protocol carries SASL tokens in requests of opcode 102 (GetSASLRequest:
// one buffer) answered with a reply header and SetSASLResponse (one
// buffer). zketcd runs the exchange on each new connection right after the
// server's connect response and before go-zookeeper sees that response, so
// go-zookeeper has sent nothing else yet and no request of its own ever
// goes out unauthenticated; every reconnect authenticates again, as
// ZooKeeper keeps the SASL identity per connection.
//
// The server side is ZooKeeper's: the JAAS "Server" section with
// org.apache.zookeeper.server.auth.DigestLoginModule and a user_<name>
// entry, and authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider
// in zoo.cfg. The ACL id is sasl:<name>. Only the "auth" quality of
// protection is used (no integrity or confidentiality layer: use TLS to
// ZooKeeper for that).

const (
	opSASL = 102
	// ZooKeeper's SASL service: protocol "zookeeper", server name
	// "zk-sasl-md5" (its DIGEST-MD5 server's fixed names).
	saslDigestURI = "zookeeper/zk-sasl-md5"
	// saslMaxFrame bounds a frame read during the exchange.
	saslMaxFrame = 64 << 10
)

// zkAuthFailed is ZooKeeper's AUTHFAILED (-115).
const zkAuthFailed = -115

// saslState is the SASL identity of a Store's connections and the
// outcome of the latest exchange.
type saslState struct {
	id *identity

	mu      sync.Mutex
	lastErr error
}

// newSASLState returns the state for the sasl identity among ids, or nil
// when there is none.
func newSASLState(ids []*identity) *saslState {
	for _, id := range ids {
		if id != nil && id.scheme == SchemeSASL {
			return &saslState{id: id}
		}
	}
	return nil
}

func (s *saslState) setErr(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

// err returns the error of the latest exchange (nil after a success).
func (s *saslState) err() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// saslConn runs the exchange inside the first Read go-zookeeper makes (the
// connect response) and then is the plain connection.
type saslConn struct {
	net.Conn
	st      *saslState
	started bool
	pending []byte // the connect response, for go-zookeeper
	xid     int32
}

func (c *saslConn) Read(p []byte) (int, error) {
	if !c.started {
		c.started = true
		frame, err := readFrame(c.Conn, 1<<20)
		if err != nil {
			return 0, err
		}
		if sessionOf(frame) != 0 {
			if err := c.exchange(); err != nil {
				c.st.setErr(err)
				return 0, err
			}
			c.st.setErr(nil)
		}
		c.pending = frame
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// sessionOf reads the session ID of a connect response frame (0: the
// session expired; ZooKeeper then closes the connection).
func sessionOf(frame []byte) int64 {
	// length, protocol version, timeout, session ID
	if len(frame) < 4+4+4+8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(frame[12:20]))
}

// readFrame reads one length-prefixed frame, the prefix included.
func readFrame(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n < 0 || n > limit {
		return nil, fmt.Errorf("zookeeper sasl: frame of %d bytes", n)
	}
	frame := make([]byte, 4+n)
	copy(frame, hdr[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		return nil, err
	}
	return frame, nil
}

// roundTrip sends one SASL token and returns the server's.
func (c *saslConn) roundTrip(token []byte) ([]byte, error) {
	c.xid++
	req := make([]byte, 0, 16+len(token))
	req = binary.BigEndian.AppendUint32(req, uint32(12+len(token)))
	req = binary.BigEndian.AppendUint32(req, uint32(c.xid))
	req = binary.BigEndian.AppendUint32(req, opSASL)
	req = binary.BigEndian.AppendUint32(req, uint32(len(token)))
	req = append(req, token...)
	if _, err := c.Conn.Write(req); err != nil {
		return nil, err
	}
	frame, err := readFrame(c.Conn, saslMaxFrame)
	if err != nil {
		return nil, err
	}
	body := frame[4:]
	if len(body) < 16 {
		return nil, errors.New("zookeeper sasl: short reply")
	}
	if code := int32(binary.BigEndian.Uint32(body[12:16])); code != 0 {
		if code == zkAuthFailed {
			return nil, fmt.Errorf("%w: ZooKeeper refused SASL DIGEST-MD5 for %s (wrong user or password, or no JAAS Server section)", ErrACL, c.st.id)
		}
		return nil, fmt.Errorf("%w: ZooKeeper answered SASL with error code %d", ErrACL, code)
	}
	body = body[16:]
	if len(body) < 4 {
		return nil, errors.New("zookeeper sasl: reply without a token")
	}
	n := int32(binary.BigEndian.Uint32(body[:4]))
	if n < 0 {
		return nil, nil
	}
	if int(n) > len(body)-4 {
		return nil, errors.New("zookeeper sasl: truncated token")
	}
	return body[4 : 4+n], nil
}

// exchange runs DIGEST-MD5: an empty initial response, the server's
// challenge, the client's response, the server's rspauth.
func (c *saslConn) exchange() error {
	challenge, err := c.roundTrip(nil)
	if err != nil {
		return err
	}
	resp, expect, err := digestMD5Response(challenge, c.st.id.user, c.st.id.pass, saslDigestURI, nil)
	if err != nil {
		return err
	}
	final, err := c.roundTrip(resp)
	if err != nil {
		return err
	}
	got, ok := bytes.CutPrefix(final, []byte("rspauth="))
	if !ok || subtle.ConstantTimeCompare(got, []byte(expect)) != 1 {
		return fmt.Errorf("%w: ZooKeeper's SASL DIGEST-MD5 answer does not prove it knows the password of %s", ErrACL, c.st.id)
	}
	return nil
}

// digestMD5Response computes the client's digest-response to a
// digest-challenge (RFC 2831 section 2.1.2, qop=auth) and the rspauth the
// server must answer. cnonce is drawn at random when nil (tests fix it).
func digestMD5Response(challenge []byte, user, pass, digestURI string, cnonce []byte) (resp []byte, rspauth string, err error) {
	ch, err := parseDigestChallenge(string(challenge))
	if err != nil {
		return nil, "", err
	}
	nonce := ch["nonce"]
	if len(nonce) != 1 {
		return nil, "", errors.New("zookeeper sasl: the challenge has no nonce")
	}
	if !slices.Contains(strings.Split(strings.Join(ch["qop"], ","), ","), "auth") && len(ch["qop"]) > 0 {
		return nil, "", errors.New("zookeeper sasl: the server does not offer qop=auth")
	}
	if alg := ch["algorithm"]; len(alg) != 1 || alg[0] != "md5-sess" {
		return nil, "", errors.New("zookeeper sasl: the challenge's algorithm is not md5-sess")
	}
	realm := ""
	if r := ch["realm"]; len(r) > 0 {
		realm = r[0]
	}
	if cnonce == nil {
		var b [18]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, "", fmt.Errorf("zookeeper sasl: cnonce: %w", err)
		}
		cnonce = []byte(base64.StdEncoding.EncodeToString(b[:]))
	}
	const nc, qop = "00000001", "auth"
	h := func(s ...string) []byte {
		m := md5.New()
		for _, p := range s {
			io.WriteString(m, p)
		}
		return m.Sum(nil)
	}
	hx := func(s ...string) string { return hex.EncodeToString(h(s...)) }
	a1 := string(h(user, ":", realm, ":", pass)) + ":" + nonce[0] + ":" + string(cnonce)
	ha1 := hx(a1)
	response := hx(ha1, ":", nonce[0], ":", nc, ":", string(cnonce), ":", qop, ":", hx("AUTHENTICATE:", digestURI))
	rspauth = hx(ha1, ":", nonce[0], ":", nc, ":", string(cnonce), ":", qop, ":", hx(":", digestURI))
	var b strings.Builder
	if cs := ch["charset"]; len(cs) == 1 && cs[0] == "utf-8" {
		b.WriteString("charset=utf-8,")
	}
	fmt.Fprintf(&b, `username=%s,realm=%s,nonce=%s,nc=%s,cnonce=%s,digest-uri=%s,maxbuf=65536,response=%s,qop=%s`,
		quoteDigest(user), quoteDigest(realm), quoteDigest(nonce[0]), nc, quoteDigest(string(cnonce)), quoteDigest(digestURI), response, qop)
	return []byte(b.String()), rspauth, nil
}

// parseDigestChallenge splits a digest-challenge into its directives
// (a directive may repeat: realm).
func parseDigestChallenge(s string) (map[string][]string, error) {
	out := map[string][]string{}
	for i := 0; i < len(s); {
		for i < len(s) && (s[i] == ',' || s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i == len(s) {
			break
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, errors.New("zookeeper sasl: malformed challenge")
		}
		key := strings.ToLower(strings.TrimSpace(s[i : i+eq]))
		i += eq + 1
		var val strings.Builder
		if i < len(s) && s[i] == '"' {
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, errors.New("zookeeper sasl: unterminated quoted value in challenge")
			}
			i++
		} else {
			end := strings.IndexByte(s[i:], ',')
			if end < 0 {
				end = len(s) - i
			}
			val.WriteString(strings.TrimSpace(s[i : i+end]))
			i += end
		}
		out[key] = append(out[key], val.String())
	}
	return out, nil
}

// quoteDigest quotes a value as a digest-response quoted-string.
func quoteDigest(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}
