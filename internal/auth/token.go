package auth

import (
	"crypto"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultTokenTTL is the lifetime of a simple token after its last use
// (etcd's --auth-token-ttl, 300 s) and of a JWT without a ttl option.
const DefaultTokenTTL = 300 * time.Second

// Info is who a request comes from: the user and the auth revision the
// credential was issued at (0: no credential).
type Info struct {
	Username string
	Revision uint64
}

// TokenProvider issues and verifies tokens. Implementations are safe for
// concurrent use.
type TokenProvider interface {
	// Assign returns a new token for user, issued on state st; index is
	// the log position st was read at.
	Assign(user string, st *State, index int64) (string, error)
	// Info verifies token against the current state st.
	Info(token string, st *State) (Info, bool)
	// Vouch returns this instance's proof that it accepts token at this
	// moment, to travel with a request it forwards (auth.Caller.Use), or
	// "" when the token needs none (a JWT carries its expiry) or is not
	// valid here. It does not extend the token's lifetime.
	Vouch(token string, st *State) string
	// Verify is Info for a token another instance received and forwards
	// with its proof of use (Vouch's; "" for none, as an older build
	// sends): its signature and expiry and, for a simple token, its idle
	// lifetime counted from the latest of its issue, its last use here and
	// the use the proof attests (a proof made with the token key, which
	// whoever could forge could mint tokens anyway); a token accepted
	// counts as used here.
	Verify(token, use string, st *State) (Info, bool)
	// Close stops background work.
	Close()
}

// ErrInvalidAuthOpts is returned by NewTokenProvider for a malformed
// --auth-token value.
var ErrInvalidAuthOpts = errors.New("auth: invalid auth options")

// NewTokenProvider parses etcd's --auth-token value: "simple" (zketcd
// adds the option secret-file=<file>, see simpleTokens) or
// "jwt,pub-key=<file>,priv-key=<file>,sign-method=<alg>[,ttl=<duration>]".
// ttl is the simple tokens' idle lifetime (--auth-token-ttl).
func NewTokenProvider(opts string, ttl time.Duration) (TokenProvider, error) {
	parts := strings.Split(opts, ",")
	kv := map[string]string{}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok || strings.Contains(v, "=") {
			return nil, fmt.Errorf("%w: %q", ErrInvalidAuthOpts, p)
		}
		if _, dup := kv[k]; dup {
			return nil, fmt.Errorf("%w: %s given twice", ErrInvalidAuthOpts, k)
		}
		kv[k] = v
	}
	switch parts[0] {
	case "simple", "":
		var local []byte
		for k, v := range kv {
			if k != "secret-file" {
				return nil, fmt.Errorf("%w: simple tokens take no option %q (only secret-file)", ErrInvalidAuthOpts, k)
			}
			var err error
			if local, err = readTokenSecret(v); err != nil {
				return nil, err
			}
		}
		t := newSimpleTokens(ttl)
		t.local = local
		return t, nil
	case "jwt":
		return newJWTTokens(kv)
	}
	return nil, fmt.Errorf("%w: unknown token type %q", ErrInvalidAuthOpts, parts[0])
}

// simpleTokens play etcd's simple tokens: opaque, valid until ttl after
// their last use, void once their user is deleted or changes password, or
// auth is disabled. etcd replicates its simple tokens through raft; zketcd
// makes them valid on every instance instead by signing them with a secret
// of the auth state (chosen at AuthEnable, so in the log):
//
//	base64url(user) "." issued-unix-ms "." base64url(HMAC-SHA256(secret, user, issued, password hash)[:16])
//
// Each instance tracks the last use of the tokens it has seen; a token it
// has not seen counts from its issue time.
//
// Everything the MAC covers is in the log, so whoever reads the root's
// ZooKeeper data (a session with its ACL identity, a copy of ZooKeeper's
// data directory, a backup) could mint tokens for any user. With
// secret-file=<file> (the same file on every instance, never in
// ZooKeeper) the MAC key is HMAC-SHA256(file secret, state secret)
// instead, so that reading ZooKeeper mints nothing; tokens of instances
// with a different file (or none) are refused.
type simpleTokens struct {
	local   []byte // the secret-file's bytes; nil: the state's secret alone
	ttl     time.Duration
	now     func() time.Time // time.Now; tests move their own clock
	mu      sync.Mutex
	lastUse map[string]time.Time
	stop    chan struct{}
	done    chan struct{}
}

func newSimpleTokens(ttl time.Duration) *simpleTokens {
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	t := &simpleTokens{ttl: ttl, now: time.Now, lastUse: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go t.expire()
	return t
}

func (t *simpleTokens) expire() {
	defer close(t.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case now := <-tick.C:
			t.mu.Lock()
			for tok, last := range t.lastUse {
				if now.Sub(last) > t.ttl {
					delete(t.lastUse, tok)
				}
			}
			t.mu.Unlock()
		}
	}
}

// simpleMAC is the signature of a simple token.
func simpleMAC(secret []byte, user, issued string, password []byte) []byte {
	m := hmac.New(sha256.New, secret)
	for _, part := range [][]byte{[]byte("zketcd simple token"), []byte(user), []byte(issued), password} {
		var n [binary.MaxVarintLen64]byte
		m.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		m.Write(part)
	}
	return m.Sum(nil)[:16]
}

// key is the MAC key of tokens issued on st.
func (t *simpleTokens) key(st *State) []byte {
	if t.local == nil {
		return st.secret
	}
	m := hmac.New(sha256.New, t.local)
	m.Write([]byte("zketcd simple token key"))
	m.Write(st.secret)
	return m.Sum(nil)
}

// MinTokenSecretBytes is the least a secret-file holds.
const MinTokenSecretBytes = 32

// readTokenSecret reads a secret-file: at least MinTokenSecretBytes bytes
// (surrounding white space ignored), e.g. 32 random bytes in base64.
func readTokenSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: secret-file: %v", ErrInvalidAuthOpts, err)
	}
	b = []byte(strings.TrimSpace(string(b)))
	if len(b) < MinTokenSecretBytes {
		return nil, fmt.Errorf("%w: secret-file %s holds %d bytes, want at least %d (e.g. head -c 32 /dev/urandom | base64)", ErrInvalidAuthOpts, path, len(b), MinTokenSecretBytes)
	}
	return b, nil
}

// LocalSecret reports whether the provider signs with a secret outside
// ZooKeeper (JWT keys, a simple token's secret-file): whoever reads the
// root's ZooKeeper data cannot mint its tokens then.
func LocalSecret(tp TokenProvider) bool {
	if s, ok := tp.(*simpleTokens); ok {
		return s.local != nil
	}
	return true
}

func (t *simpleTokens) Assign(user string, st *State, _ int64) (string, error) {
	u := st.User(user)
	if u == nil || len(st.secret) == 0 {
		return "", errors.New("simple token: no such user or auth disabled")
	}
	now := t.now()
	issued := strconv.FormatInt(now.UnixMilli(), 10)
	tok := base64.RawURLEncoding.EncodeToString([]byte(user)) + "." + issued + "." +
		base64.RawURLEncoding.EncodeToString(simpleMAC(t.key(st), user, issued, u.Password))
	t.mu.Lock()
	t.lastUse[tok] = now
	t.mu.Unlock()
	return tok, nil
}

// Info checks the signature against the current state and the lifetime,
// and extends it; a simple token always carries the current auth revision
// (as etcd's: changes to its user void it instead).
func (t *simpleTokens) Info(token string, st *State) (Info, bool) {
	return t.use(token, st, time.Time{})
}

// Verify is Info for a forwarded token: its idle lifetime also counts the
// use its origin attests (Vouch), so a token kept alive through another
// instance stays valid here, and one idle everywhere does not.
func (t *simpleTokens) Verify(token, use string, st *State) (Info, bool) {
	return t.use(token, st, t.attested(token, use, st))
}

// use checks token's signature and its idle lifetime, counted from the
// latest of its issue, its last use here and attested (zero: none), and
// records the use.
func (t *simpleTokens) use(token string, st *State, attested time.Time) (Info, bool) {
	info, ms, ok := t.signed(token, st)
	if !ok {
		return Info{}, false
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	last, seen := t.lastUse[token]
	if !seen {
		last = time.UnixMilli(ms)
	}
	if attested.After(last) {
		last = attested
	}
	if now.Sub(last) > t.ttl {
		delete(t.lastUse, token)
		return Info{}, false
	}
	t.lastUse[token] = now
	return info, true
}

// Vouch proves that this instance accepts token now: the time and a MAC
// of the token and the time under the token key, "<unix-ms>.<mac>".
func (t *simpleTokens) Vouch(token string, st *State) string {
	_, ms, ok := t.signed(token, st)
	if !ok {
		return ""
	}
	now := t.now()
	t.mu.Lock()
	last, seen := t.lastUse[token]
	t.mu.Unlock()
	if !seen {
		last = time.UnixMilli(ms)
	}
	if now.Sub(last) > t.ttl {
		return ""
	}
	at := strconv.FormatInt(now.UnixMilli(), 10)
	return at + "." + base64.RawURLEncoding.EncodeToString(useMAC(t.key(st), token, at))
}

// attested returns the time a proof of use of token (Vouch's) attests,
// zero if it is absent or not made with this state's token key. A time
// ahead of this instance's clock (the origin's runs ahead) counts as now,
// up to one TTL ahead; beyond, the proof counts for nothing (the
// instances' clocks must agree within the TTL).
func (t *simpleTokens) attested(token, use string, st *State) time.Time {
	at, mac, ok := strings.Cut(use, ".")
	if !ok || len(st.secret) == 0 {
		return time.Time{}
	}
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return time.Time{}
	}
	got, err := base64.RawURLEncoding.DecodeString(mac)
	if err != nil || !hmac.Equal(got, useMAC(t.key(st), token, at)) {
		return time.Time{}
	}
	when, now := time.UnixMilli(ms), t.now()
	switch {
	case when.Sub(now) > t.ttl:
		return time.Time{}
	case when.After(now):
		return now
	}
	return when
}

// useMAC is the MAC of a proof of use of token at (Unix milliseconds).
func useMAC(key []byte, token, at string) []byte {
	m := hmac.New(sha256.New, key)
	for _, part := range [][]byte{[]byte("zketcd token use"), []byte(token), []byte(at)} {
		var n [binary.MaxVarintLen64]byte
		m.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		m.Write(part)
	}
	return m.Sum(nil)[:16]
}

// signed checks token's signature against st and returns who it names and
// its issue time (Unix milliseconds).
func (t *simpleTokens) signed(token string, st *State) (Info, int64, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || len(st.secret) == 0 {
		return Info{}, 0, false
	}
	name, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return Info{}, 0, false
	}
	ms, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return Info{}, 0, false
	}
	mac, err := base64.RawURLEncoding.DecodeString(parts[2])
	u := st.User(string(name))
	if err != nil || u == nil || !hmac.Equal(mac, simpleMAC(t.key(st), string(name), parts[1], u.Password)) {
		return Info{}, 0, false
	}
	return Info{Username: string(name), Revision: st.Revision}, ms, true
}

func (t *simpleTokens) Close() {
	select {
	case <-t.done:
	default:
		close(t.stop)
		<-t.done
	}
}

// jwtTokens are signed JWTs with etcd's claims (username, revision, exp):
// any instance with the same keys verifies them.
type jwtTokens struct {
	method     jwt.SigningMethod
	key        any // private key (or HMAC secret); a public key when verify-only
	verifyKey  any
	ttl        time.Duration
	verifyOnly bool
}

func newJWTTokens(kv map[string]string) (*jwtTokens, error) {
	t := &jwtTokens{ttl: 5 * time.Minute}
	if s := kv["ttl"]; s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("%w: ttl: %v", ErrInvalidAuthOpts, err)
		}
		t.ttl = d
	}
	var pub, priv []byte
	var err error
	if f := kv["pub-key"]; f != "" {
		if pub, err = os.ReadFile(f); err != nil {
			return nil, fmt.Errorf("%w: pub-key: %v", ErrInvalidAuthOpts, err)
		}
	}
	if f := kv["priv-key"]; f != "" {
		if priv, err = os.ReadFile(f); err != nil {
			return nil, fmt.Errorf("%w: priv-key: %v", ErrInvalidAuthOpts, err)
		}
	}
	t.method = jwt.GetSigningMethod(kv["sign-method"])
	if t.method == nil {
		return nil, fmt.Errorf("%w: invalid auth signature method %q", ErrInvalidAuthOpts, kv["sign-method"])
	}
	var privKey, pubKey crypto.PublicKey
	switch t.method.(type) {
	case *jwt.SigningMethodHMAC:
		if len(priv) == 0 {
			return nil, fmt.Errorf("%w: sign-method %s needs priv-key", ErrInvalidAuthOpts, t.method.Alg())
		}
		t.key, t.verifyKey = priv, priv
		return t, nil
	case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
		if len(priv) > 0 {
			if privKey, err = jwt.ParseRSAPrivateKeyFromPEM(priv); err != nil {
				return nil, fmt.Errorf("%w: priv-key: %v", ErrInvalidAuthOpts, err)
			}
		}
		if len(pub) > 0 {
			if pubKey, err = jwt.ParseRSAPublicKeyFromPEM(pub); err != nil {
				return nil, fmt.Errorf("%w: pub-key: %v", ErrInvalidAuthOpts, err)
			}
		}
	case *jwt.SigningMethodECDSA:
		if len(priv) > 0 {
			if privKey, err = jwt.ParseECPrivateKeyFromPEM(priv); err != nil {
				return nil, fmt.Errorf("%w: priv-key: %v", ErrInvalidAuthOpts, err)
			}
		}
		if len(pub) > 0 {
			if pubKey, err = jwt.ParseECPublicKeyFromPEM(pub); err != nil {
				return nil, fmt.Errorf("%w: pub-key: %v", ErrInvalidAuthOpts, err)
			}
		}
	case *jwt.SigningMethodEd25519:
		if len(priv) > 0 {
			if privKey, err = jwt.ParseEdPrivateKeyFromPEM(priv); err != nil {
				return nil, fmt.Errorf("%w: priv-key: %v", ErrInvalidAuthOpts, err)
			}
		}
		if len(pub) > 0 {
			if pubKey, err = jwt.ParseEdPublicKeyFromPEM(pub); err != nil {
				return nil, fmt.Errorf("%w: pub-key: %v", ErrInvalidAuthOpts, err)
			}
		}
	default:
		return nil, fmt.Errorf("%w: unsupported signing method %s", ErrInvalidAuthOpts, t.method.Alg())
	}
	if privKey == nil {
		if pubKey == nil {
			return nil, fmt.Errorf("%w: missing key data", ErrInvalidAuthOpts)
		}
		t.verifyKey, t.verifyOnly = pubKey, true
		return t, nil
	}
	pubOfPriv := privKey.(interface{ Public() crypto.PublicKey }).Public()
	if pubKey != nil && !pubKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(pubOfPriv) {
		return nil, fmt.Errorf("%w: public and private keys don't match", ErrInvalidAuthOpts)
	}
	t.key, t.verifyKey = privKey, pubOfPriv
	return t, nil
}

var errVerifyOnly = errors.New("auth: token signing attempted with verify-only key")

func (t *jwtTokens) Assign(user string, st *State, _ int64) (string, error) {
	rev := st.Revision
	if t.verifyOnly {
		return "", errVerifyOnly
	}
	tok := jwt.NewWithClaims(t.method, jwt.MapClaims{
		"username": user, "revision": rev, "exp": time.Now().Add(t.ttl).Unix(),
	})
	s, err := tok.SignedString(t.key)
	if err != nil {
		return "", fmt.Errorf("sign jwt: %w", err)
	}
	return s, nil
}

// Info verifies the signature (with the configured method only) and the
// expiry; the token carries the auth revision it was issued at.
func (t *jwtTokens) Info(token string, _ *State) (Info, bool) {
	parsed, err := jwt.Parse(token, func(*jwt.Token) (any, error) { return t.verifyKey, nil },
		jwt.WithValidMethods([]string{t.method.Alg()}))
	if err != nil || !parsed.Valid {
		return Info{}, false
	}
	claims, ok := parsed.Claims.(jwt.MapClaims)
	if !ok {
		return Info{}, false
	}
	user, ok := claims["username"].(string)
	if !ok {
		return Info{}, false
	}
	rev, ok := claims["revision"].(float64)
	if !ok || rev < 0 {
		return Info{}, false
	}
	return Info{Username: user, Revision: uint64(rev)}, true
}

// Vouch: a JWT carries its whole lifetime, so needs no proof of use.
func (t *jwtTokens) Vouch(string, *State) string { return "" }

// Verify is Info: a JWT carries its whole lifetime.
func (t *jwtTokens) Verify(token, _ string, st *State) (Info, bool) { return t.Info(token, st) }

func (t *jwtTokens) Close() {}
