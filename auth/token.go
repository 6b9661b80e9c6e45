package auth

import (
	"crypto"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
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
	// Assign returns a new token for user, issued at auth revision rev;
	// index is the log position the state was read at.
	Assign(user string, rev uint64, index int64) (string, error)
	// Info verifies token; cur is the current auth revision.
	Info(token string, cur uint64) (Info, bool)
	// Invalidate drops the tokens for which drop(user) is true.
	Invalidate(drop func(user string) bool)
	// Close stops background work.
	Close()
}

// ErrInvalidAuthOpts is returned by NewTokenProvider for a malformed
// --auth-token value.
var ErrInvalidAuthOpts = errors.New("auth: invalid auth options")

// NewTokenProvider parses etcd's --auth-token value: "simple" or
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
		return newSimpleTokens(ttl), nil
	case "jwt":
		return newJWTTokens(kv)
	}
	return nil, fmt.Errorf("%w: unknown token type %q", ErrInvalidAuthOpts, parts[0])
}

// simpleTokens are etcd's simple tokens: 16 random letters, a dot and the
// log index. They live in this instance's memory only (another instance
// answers them with "invalid auth token", and clients authenticate again)
// and expire ttl after their last use.
type simpleTokens struct {
	ttl    time.Duration
	mu     sync.Mutex
	tokens map[string]*simpleToken
	stop   chan struct{}
	done   chan struct{}
}

type simpleToken struct {
	user    string
	expires time.Time
}

const tokenLetters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

func newSimpleTokens(ttl time.Duration) *simpleTokens {
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	t := &simpleTokens{ttl: ttl, tokens: map[string]*simpleToken{}, stop: make(chan struct{}), done: make(chan struct{})}
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
			for tok, st := range t.tokens {
				if now.After(st.expires) {
					delete(t.tokens, tok)
				}
			}
			t.mu.Unlock()
		}
	}
}

func (t *simpleTokens) Assign(user string, _ uint64, index int64) (string, error) {
	b := make([]byte, 16)
	for i := range b {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(tokenLetters))))
		if err != nil {
			return "", fmt.Errorf("simple token: %w", err)
		}
		b[i] = tokenLetters[n.Int64()]
	}
	tok := string(b) + "." + strconv.FormatInt(index, 10)
	t.mu.Lock()
	t.tokens[tok] = &simpleToken{user: user, expires: time.Now().Add(t.ttl)}
	t.mu.Unlock()
	return tok, nil
}

// Info finds a live token and extends its life; a simple token always
// carries the current auth revision (etcd's: changes to its user delete it
// instead).
func (t *simpleTokens) Info(token string, cur uint64) (Info, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.tokens[token]
	if !ok || time.Now().After(st.expires) {
		return Info{}, false
	}
	st.expires = time.Now().Add(t.ttl)
	return Info{Username: st.user, Revision: cur}, true
}

func (t *simpleTokens) Invalidate(drop func(string) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for tok, st := range t.tokens {
		if drop(st.user) {
			delete(t.tokens, tok)
		}
	}
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

func (t *jwtTokens) Assign(user string, rev uint64, _ int64) (string, error) {
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
func (t *jwtTokens) Info(token string, _ uint64) (Info, bool) {
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

func (t *jwtTokens) Invalidate(func(string) bool) {}
func (t *jwtTokens) Close()                       {}
