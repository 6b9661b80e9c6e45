package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Source returns the encoded current auth state (see State.Encode) and the
// log position it was read at. It is called on every check, so it must be
// cheap; Store decodes a state once per distinct slice it returns.
type Source func() (state []byte, lsn int64)

// Config configures a Store.
type Config struct {
	// BcryptCost is the bcrypt cost of new password hashes (etcd's
	// --bcrypt-cost); out of bcrypt's range it is bcrypt.DefaultCost, as in
	// etcd.
	BcryptCost int
	// Tokens issues and verifies tokens (nil: simple tokens with the
	// default TTL).
	Tokens TokenProvider
	// ClientCertAuth makes the common name of a verified client certificate
	// authenticate a request that has no token (etcd's --client-cert-auth).
	ClientCertAuth bool
	Logger         *logrus.Entry
}

// Store answers authentication and permission checks on the state Source
// returns. Safe for concurrent use.
type Store struct {
	src       Source
	cfg       Config
	lg        *logrus.Entry
	dummyOnce sync.Once
	dummy     []byte // a hash compared against when the user does not exist (see dummyHash)
	cache     atomic.Pointer[decoded]
	mu        sync.Mutex // serialises decoding a new state
	broken    error      // under mu

	// loginKey keys the MACs of the passwords that succeeded (good): a
	// password that succeeded for a user with the same hash before is
	// known right without a bcrypt comparison (Remembered).
	loginKey [32]byte
	goodMu   sync.Mutex
	good     map[[sha256.Size]byte]struct{}
}

// rememberedLogins bounds the successes remembered (forgotten all at once
// beyond it: each is a bcrypt comparison away from being remembered again).
const rememberedLogins = 4096

// decoded is the state decoded from one slice the Source returned.
type decoded struct {
	raw   []byte
	lsn   int64 // log position raw was read at
	state *State
	perms *Perms
}

// NewStore returns a Store reading src.
func NewStore(src Source, cfg Config) *Store {
	if cfg.BcryptCost < bcrypt.MinCost || cfg.BcryptCost > bcrypt.MaxCost {
		cfg.BcryptCost = bcrypt.DefaultCost
	}
	if cfg.Tokens == nil {
		cfg.Tokens = newSimpleTokens(DefaultTokenTTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = logrus.NewEntry(logrus.StandardLogger())
	}
	s := &Store{src: src, cfg: cfg, lg: cfg.Logger.WithField("component", "auth"), good: map[[sha256.Size]byte]struct{}{}}
	if _, err := rand.Read(s.loginKey[:]); err != nil {
		panic(fmt.Sprintf("auth: no randomness for the login key: %v", err)) // crypto/rand never fails on supported platforms
	}
	init := Initial()
	s.cache.Store(&decoded{state: init, perms: NewPerms(init)})
	return s
}

// dummyHash returns a hash of the configured cost to compare a password
// with when the user does not exist (made at the first such login, so that
// starting an instance costs no bcrypt run).
func (s *Store) dummyHash() []byte {
	s.dummyOnce.Do(func() {
		s.dummy, _ = bcrypt.GenerateFromPassword([]byte("zketcd: no such user"), s.cfg.BcryptCost)
	})
	return s.dummy
}

// Close stops the token provider.
func (s *Store) Close() { s.cfg.Tokens.Close() }

// BcryptCost is the cost of new hashes.
func (s *Store) BcryptCost() int { return s.cfg.BcryptCost }

func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// Current returns the current state and its permission checker. The
// common case (the state did not change) takes no lock. A state that
// cannot be decoded (never written by this package) keeps the last good
// one and is logged.
func (s *Store) Current() (*State, *Perms) {
	raw, lsn := s.src()
	if c := s.cache.Load(); sameSlice(raw, c.raw) {
		return c.state, c.perms
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cache.Load()
	if sameSlice(raw, c.raw) || lsn < c.lsn {
		// Unchanged, or read before the cached state: the cached one is
		// at least as new.
		return c.state, c.perms
	}
	st, err := Decode(raw)
	if err != nil {
		if s.broken == nil {
			s.lg.WithError(err).Error("cannot decode the auth state; keeping the last one")
		}
		s.broken = err
		return c.state, c.perms
	}
	s.broken = nil
	n := &decoded{raw: raw, lsn: lsn, state: st, perms: NewPerms(st)}
	s.cache.Store(n)
	return n.state, n.perms
}

// Enabled reports whether authentication is on.
func (s *Store) Enabled() bool {
	st, _ := s.Current()
	return st.Enabled
}

// Prepare returns the request to put in the log for a changing Auth
// request: UserAdd and UserChangePassword get their password replaced by
// its bcrypt hash (base64, in HashedPassword); other requests are returned
// as they are. As in etcd, UserAdd always hashes Password (a client's
// HashedPassword is ignored) and UserChangePassword without a Password
// takes the client's HashedPassword.
func (s *Store) Prepare(req proto.Message) (proto.Message, error) {
	hash := func(pw string) (string, error) {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), s.cfg.BcryptCost)
		if err != nil {
			// e.g. a password over 72 bytes; etcd sends bcrypt's error as Unknown
			return "", status.Error(codes.Unknown, err.Error())
		}
		return base64.StdEncoding.EncodeToString(h), nil
	}
	switch r := req.(type) {
	case *pb.AuthUserAddRequest:
		if r.Options != nil && r.Options.NoPassword {
			return &pb.AuthUserAddRequest{Name: r.Name, Options: r.Options}, nil
		}
		h, err := hash(r.Password)
		if err != nil {
			return nil, err
		}
		return &pb.AuthUserAddRequest{Name: r.Name, Options: r.Options, HashedPassword: h}, nil
	case *pb.AuthUserChangePasswordRequest:
		if r.Password == "" {
			return r, nil
		}
		h, err := hash(r.Password)
		if err != nil {
			return nil, err
		}
		return &pb.AuthUserChangePasswordRequest{Name: r.Name, HashedPassword: h}, nil
	}
	return req, nil
}

// Authenticate checks name's password and returns a token. The bcrypt
// comparison runs whether or not the user exists, so the answer time does
// not tell which users exist; a password that succeeded before for the
// same user and password hash is known right without it (see Remembered).
// Errors: ErrGRPCAuthNotEnabled, ErrGRPCAuthFailed, etcd's no-password-user
// error.
func (s *Store) Authenticate(name, password string) (*pb.AuthenticateResponse, error) {
	st, _ := s.Current()
	if !st.Enabled {
		return nil, rpctypes.ErrGRPCAuthNotEnabled
	}
	_, lsn := s.src()
	u := st.User(name)
	if u != nil && u.Options != nil && u.Options.NoPassword {
		return nil, errNoPasswordUser
	}
	var mac [sha256.Size]byte
	known := false
	if u != nil {
		mac = s.loginMAC(name, password, u.Password)
		known = s.known(mac)
	}
	if !known {
		hash := s.dummyHash()
		if u != nil {
			hash = u.Password
		}
		if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil || u == nil {
			s.lg.WithField("user", name).Info("authentication failed")
			return nil, rpctypes.ErrGRPCAuthFailed
		}
		s.remember(mac)
	}
	tok, err := s.cfg.Tokens.Assign(name, st, lsn)
	if err != nil {
		return nil, fmt.Errorf("assign token: %w", err)
	}
	return &pb.AuthenticateResponse{Token: tok}, nil
}

// Remembered reports whether password succeeded before for name with the
// password hash name has in the current state: Authenticate then checks
// it without bcrypt, so the caller need not wait for a bcrypt slot (a
// user keeps logging in while someone guesses its password). A changed
// password, or another password, is never remembered. Safe for concurrent
// use.
func (s *Store) Remembered(name, password string) bool {
	st, _ := s.Current()
	u := st.User(name)
	if !st.Enabled || u == nil || len(u.Password) == 0 {
		return false
	}
	return s.known(s.loginMAC(name, password, u.Password))
}

// loginMAC identifies a user, a password and the user's stored hash.
func (s *Store) loginMAC(name, password string, hash []byte) [sha256.Size]byte {
	m := hmac.New(sha256.New, s.loginKey[:])
	for _, part := range [][]byte{[]byte(name), []byte(password), hash} {
		var n [binary.MaxVarintLen64]byte
		m.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		m.Write(part)
	}
	var out [sha256.Size]byte
	copy(out[:], m.Sum(nil))
	return out
}

func (s *Store) known(mac [sha256.Size]byte) bool {
	s.goodMu.Lock()
	defer s.goodMu.Unlock()
	_, ok := s.good[mac]
	return ok
}

func (s *Store) remember(mac [sha256.Size]byte) {
	s.goodMu.Lock()
	defer s.goodMu.Unlock()
	if len(s.good) >= rememberedLogins {
		clear(s.good)
	}
	s.good[mac] = struct{}{}
}

// TokenFor issues a token for user on the current state, for calls the
// server makes on behalf of a caller it authenticated otherwise (by its
// client certificate): the v3lock and v3election recipes, whose inner KV
// calls carry the caller's identity as a token. Errors: the provider's
// (a JWT provider with only a public key cannot sign).
func (s *Store) TokenFor(user string) (string, error) {
	st, _ := s.Current()
	_, lsn := s.src()
	if st.User(user) == nil {
		return "", rpctypes.ErrGRPCUserNotFound
	}
	return s.cfg.Tokens.Assign(user, st, lsn)
}

// AuthInfo returns who ctx's request comes from: the user of its token
// (gRPC metadata "token", or "authorization" with an optional "Bearer "),
// else, with ClientCertAuth, the common name of its verified client
// certificate; nil if neither, or if auth is off. A request another
// instance forwarded (WithForwardedCaller) is its caller's. Errors:
// ErrGRPCInvalidAuthToken for a token that is not valid.
func (s *Store) AuthInfo(ctx context.Context) (*Info, error) {
	return s.AuthInfoAt(ctx, s.Checker())
}

// AuthInfoAt is AuthInfo against the state of c. It reads nothing but c
// (it never calls the Source).
func (s *Store) AuthInfoAt(ctx context.Context, c Checker) (*Info, error) {
	st := c.state
	if !st.Enabled {
		return nil, nil
	}
	if ai, ok, err := s.forwardedInfo(ctx, st); ok {
		return ai, err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if tok, ok := tokenOf(md); ok {
		info, valid := s.cfg.Tokens.Info(tok, st)
		if !valid {
			return nil, rpctypes.ErrGRPCInvalidAuthToken
		}
		return &info, nil
	}
	if !s.cfg.ClientCertAuth {
		return nil, nil
	}
	return s.infoFromTLS(ctx, md, st.Revision), nil
}

func (s *Store) infoFromTLS(ctx context.Context, md metadata.MD, rev uint64) *Info {
	p, ok := peer.FromContext(ctx)
	if !ok || p == nil || p.AuthInfo == nil {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil
	}
	for _, chain := range ti.State.VerifiedChains {
		if len(chain) == 0 {
			continue
		}
		if len(md["grpcgateway-accept"]) > 0 {
			return nil // as etcd: the gateway's own certificate is not a user
		}
		return &Info{Username: chain[0].Subject.CommonName, Revision: rev}
	}
	return nil
}

// Checker answers permission checks against one auth state. Safe for
// concurrent use.
type Checker struct {
	raw   []byte
	state *State
	perms *Perms
}

// Checker returns the checker of the current state.
func (s *Store) Checker() Checker {
	s.Current()
	c := s.cache.Load()
	return Checker{raw: c.raw, state: c.state, perms: c.perms}
}

// CheckerFor returns the checker of the encoded state raw (the current
// one's if raw is the current slice). Errors: ErrCorruptState.
func (s *Store) CheckerFor(raw []byte) (Checker, error) {
	if c := s.cache.Load(); sameSlice(raw, c.raw) {
		return Checker{raw: c.raw, state: c.state, perms: c.perms}, nil
	}
	st, err := Decode(raw)
	if err != nil {
		return Checker{}, err
	}
	return Checker{raw: raw, state: st, perms: NewPerms(st)}, nil
}

// Same reports whether raw is the encoded state this checker checks.
func (c Checker) Same(raw []byte) bool { return sameSlice(raw, c.raw) }

// Enabled reports whether authentication is on in the checker's state.
func (c Checker) Enabled() bool { return c.state.Enabled }

// checkOp is etcd's permission check of one key or range operation.
func (c Checker) checkOp(ai *Info, key, end []byte, typ authpb.Permission_Type) error {
	if !c.state.Enabled {
		return nil
	}
	if ai == nil || ai.Revision == 0 {
		return rpctypes.ErrGRPCUserEmpty
	}
	if ai.Revision < c.state.Revision {
		return rpctypes.ErrGRPCAuthOldRevision
	}
	if !c.perms.Permitted(ai.Username, key, end, typ) {
		return rpctypes.ErrGRPCPermissionDenied
	}
	return nil
}

// CheckRange checks READ permission on [key, end).
func (c Checker) CheckRange(ai *Info, key, end []byte) error {
	return c.checkOp(ai, key, end, authpb.Permission_READ)
}

// CheckPut checks WRITE permission on key.
func (c Checker) CheckPut(ai *Info, key []byte) error {
	return c.checkOp(ai, key, nil, authpb.Permission_WRITE)
}

// CheckDelete checks WRITE permission on [key, end).
func (c Checker) CheckDelete(ai *Info, key, end []byte) error {
	return c.checkOp(ai, key, end, authpb.Permission_WRITE)
}

// CheckAdmin checks that ai is a user with the root role. Errors:
// ErrGRPCUserEmpty, ErrGRPCUserNotFound, ErrGRPCPermissionDenied.
func (c Checker) CheckAdmin(ai *Info) error {
	if !c.state.Enabled {
		return nil
	}
	if ai == nil || ai.Username == "" {
		return rpctypes.ErrGRPCUserEmpty
	}
	u := c.state.User(ai.Username)
	if u == nil {
		return rpctypes.ErrGRPCUserNotFound
	}
	if !hasRole(u, RootRole) {
		return rpctypes.ErrGRPCPermissionDenied
	}
	return nil
}

// HasRole reports whether user has role.
func (c Checker) HasRole(user, role string) bool {
	u := c.state.User(user)
	return u != nil && hasRole(u, role)
}

// CheckRange checks READ permission on [key, end) in the current state.
func (s *Store) CheckRange(ai *Info, key, end []byte) error {
	return s.Checker().CheckRange(ai, key, end)
}

// CheckPut checks WRITE permission on key in the current state.
func (s *Store) CheckPut(ai *Info, key []byte) error { return s.Checker().CheckPut(ai, key) }

// CheckDelete checks WRITE permission on [key, end) in the current state.
func (s *Store) CheckDelete(ai *Info, key, end []byte) error {
	return s.Checker().CheckDelete(ai, key, end)
}

// CheckAdmin checks, in the current state, that ai has the root role.
func (s *Store) CheckAdmin(ai *Info) error { return s.Checker().CheckAdmin(ai) }

// HasRole reports whether user has role in the current state.
func (s *Store) HasRole(user, role string) bool { return s.Checker().HasRole(user, role) }

func hasRole(u *authpb.User, role string) bool {
	for _, r := range u.Roles {
		if r == role {
			return true
		}
	}
	return false
}

// rootPerm is what RoleGet shows for the root role.
func rootPerm() *authpb.Permission {
	return &authpb.Permission{PermType: authpb.Permission_READWRITE, Key: []byte{}, RangeEnd: []byte{0}}
}

// Read answers the read-only Auth requests (UserGet, UserList, RoleGet,
// RoleList, AuthStatus) from the current state; the response header is
// left for the caller.
func (s *Store) Read(req proto.Message) (proto.Message, error) {
	st, _ := s.Current()
	switch r := req.(type) {
	case *pb.AuthStatusRequest:
		return &pb.AuthStatusResponse{Enabled: st.Enabled, AuthRevision: st.Revision}, nil
	case *pb.AuthUserGetRequest:
		u := st.User(r.Name)
		if u == nil {
			return nil, rpctypes.ErrGRPCUserNotFound
		}
		return &pb.AuthUserGetResponse{Roles: append([]string(nil), u.Roles...)}, nil
	case *pb.AuthUserListRequest:
		return &pb.AuthUserListResponse{Users: st.UserNames()}, nil
	case *pb.AuthRoleGetRequest:
		ro := st.Role(r.Role)
		if ro == nil {
			return nil, rpctypes.ErrGRPCRoleNotFound
		}
		if r.Role == RootRole {
			return &pb.AuthRoleGetResponse{Perm: []*authpb.Permission{rootPerm()}}, nil
		}
		return &pb.AuthRoleGetResponse{Perm: ro.KeyPermission}, nil
	case *pb.AuthRoleListRequest:
		return &pb.AuthRoleListResponse{Roles: st.RoleNames()}, nil
	}
	return nil, fmt.Errorf("auth: %T is not a read request", req)
}

// Revision is the auth revision of the checker's state.
func (c Checker) Revision() uint64 { return c.state.Revision }
