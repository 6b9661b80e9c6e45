package auth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/testutil"
)

// memSource is a Source over a state kept in memory.
type memSource struct{ raw []byte }

func (m *memSource) src() ([]byte, int64) { return m.raw, 7 }

// newTestStore returns a store on an in-memory state and a function that
// applies changes to it (through Prepare and Apply, as the server does).
func newTestStore(t *testing.T, tp TokenProvider) (*Store, func(proto.Message) error) {
	t.Helper()
	m := &memSource{}
	st := NewStore(m.src, Config{BcryptCost: bcrypt.MinCost, Tokens: tp})
	t.Cleanup(st.Close)
	apply := func(req proto.Message) error {
		prepared, err := st.Prepare(req)
		if err != nil {
			return err
		}
		cur, err := Decode(m.raw)
		if err != nil {
			return err
		}
		next, _, err := cur.Apply(prepared, testEntropy)
		if err != nil {
			return err
		}
		if next != cur {
			m.raw = next.Encode()
		}
		return nil
	}
	return st, apply
}

// testEntropy stands for the random bytes the server draws per request.
var testEntropy = bytes.Repeat([]byte{7}, 32)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Fatalf("error %v, want %v", got, want)
	}
}

func setupRootAndAlice(t *testing.T, apply func(proto.Message) error) {
	t.Helper()
	for _, req := range []proto.Message{
		&pb.AuthUserAddRequest{Name: "root", Password: "rootpw"},
		&pb.AuthUserGrantRoleRequest{User: "root", Role: "root"},
		&pb.AuthRoleAddRequest{Name: "reader"},
		&pb.AuthRoleGrantPermissionRequest{Name: "reader", Perm: &authpb.Permission{PermType: authpb.Permission_READ, Key: []byte("/foo/"), RangeEnd: []byte("/foo0")}},
		&pb.AuthRoleGrantPermissionRequest{Name: "reader", Perm: &authpb.Permission{PermType: authpb.Permission_READWRITE, Key: []byte("/bar")}},
		&pb.AuthUserAddRequest{Name: "alice", Password: "alicepw"},
		&pb.AuthUserGrantRoleRequest{User: "alice", Role: "reader"},
	} {
		must(t, apply(req))
	}
}

func TestAuthEnableRequiresRootUserWithRootRole(t *testing.T) {
	_, apply := newTestStore(t, nil)
	wantErr(t, apply(&pb.AuthEnableRequest{}), rpctypes.ErrGRPCRootUserNotExist)
	must(t, apply(&pb.AuthUserAddRequest{Name: "root", Password: "pw"}))
	wantErr(t, apply(&pb.AuthEnableRequest{}), rpctypes.ErrGRPCRootRoleNotExist)
	// As etcd: the root role may be granted before it exists.
	must(t, apply(&pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}))
	must(t, apply(&pb.AuthEnableRequest{}))
}

func TestRootRulesWhileEnabled(t *testing.T) {
	st, apply := newTestStore(t, nil)
	setupRootAndAlice(t, apply)
	must(t, apply(&pb.AuthEnableRequest{}))
	wantErr(t, apply(&pb.AuthUserDeleteRequest{Name: "root"}), rpctypes.ErrGRPCInvalidAuthMgmt)
	wantErr(t, apply(&pb.AuthUserRevokeRoleRequest{Name: "root", Role: "root"}), rpctypes.ErrGRPCInvalidAuthMgmt)
	wantErr(t, apply(&pb.AuthRoleDeleteRequest{Role: "root"}), rpctypes.ErrGRPCInvalidAuthMgmt)
	must(t, apply(&pb.AuthDisableRequest{}))
	if st.Enabled() {
		t.Fatal("still enabled")
	}
	must(t, apply(&pb.AuthUserRevokeRoleRequest{Name: "root", Role: "root"}))
}

func TestManagementErrorsAreEtcds(t *testing.T) {
	_, apply := newTestStore(t, nil)
	cases := []struct {
		req  proto.Message
		want error
	}{
		{&pb.AuthUserAddRequest{}, rpctypes.ErrGRPCUserEmpty},
		{&pb.AuthRoleAddRequest{}, rpctypes.ErrGRPCRoleEmpty},
		{&pb.AuthUserDeleteRequest{Name: "x"}, rpctypes.ErrGRPCUserNotFound},
		{&pb.AuthUserChangePasswordRequest{Name: "x", Password: "p"}, rpctypes.ErrGRPCUserNotFound},
		{&pb.AuthUserGrantRoleRequest{User: "x", Role: "r"}, rpctypes.ErrGRPCUserNotFound},
		{&pb.AuthRoleDeleteRequest{Role: "r"}, rpctypes.ErrGRPCRoleNotFound},
		{&pb.AuthRoleGrantPermissionRequest{Name: "r"}, rpctypes.ErrGRPCPermissionNotGiven},
		{&pb.AuthRoleGrantPermissionRequest{Name: "r", Perm: &authpb.Permission{}}, rpctypes.ErrGRPCInvalidAuthMgmt},
		{&pb.AuthRoleGrantPermissionRequest{Name: "r", Perm: &authpb.Permission{Key: []byte("b"), RangeEnd: []byte("a")}}, rpctypes.ErrGRPCInvalidAuthMgmt},
		{&pb.AuthRoleGrantPermissionRequest{Name: "r", Perm: &authpb.Permission{Key: []byte("a")}}, rpctypes.ErrGRPCRoleNotFound},
		{&pb.AuthRoleRevokePermissionRequest{Role: "r", Key: []byte("a")}, rpctypes.ErrGRPCRoleNotFound},
	}
	for _, c := range cases {
		if err := apply(c.req); !errors.Is(err, c.want) {
			t.Errorf("%T %v: error %v, want %v", c.req, c.req, err, c.want)
		}
	}
	must(t, apply(&pb.AuthUserAddRequest{Name: "u", Password: "p"}))
	wantErr(t, apply(&pb.AuthUserAddRequest{Name: "u", Password: "p"}), rpctypes.ErrGRPCUserAlreadyExist)
	must(t, apply(&pb.AuthRoleAddRequest{Name: "r"}))
	wantErr(t, apply(&pb.AuthRoleAddRequest{Name: "r"}), rpctypes.ErrGRPCRoleAlreadyExist)
	wantErr(t, apply(&pb.AuthUserGrantRoleRequest{User: "u", Role: "nope"}), rpctypes.ErrGRPCRoleNotFound)
	wantErr(t, apply(&pb.AuthUserRevokeRoleRequest{Name: "u", Role: "r"}), rpctypes.ErrGRPCRoleNotGranted)
	wantErr(t, apply(&pb.AuthRoleRevokePermissionRequest{Role: "r", Key: []byte("a")}), rpctypes.ErrGRPCPermissionNotGranted)
	// bcrypt refuses passwords over 72 bytes; etcd sends its error as Unknown.
	if err := apply(&pb.AuthUserAddRequest{Name: "long", Password: string(bytes.Repeat([]byte("x"), 73))}); status.Code(err) != codes.Unknown {
		t.Errorf("73-byte password: %v, want code Unknown", err)
	}
}

func TestAuthRevisionCountsChangesNotEnable(t *testing.T) {
	st, apply := newTestStore(t, nil)
	rev := func() uint64 { s, _ := st.Current(); return s.Revision }
	if rev() != 1 {
		t.Fatalf("fresh revision %d, want 1", rev())
	}
	setupRootAndAlice(t, apply) // 7 changes
	if rev() != 8 {
		t.Fatalf("revision %d, want 8", rev())
	}
	must(t, apply(&pb.AuthUserGrantRoleRequest{User: "alice", Role: "reader"})) // already granted: no change
	must(t, apply(&pb.AuthEnableRequest{}))
	if rev() != 8 {
		t.Fatalf("revision after enable %d, want 8", rev())
	}
	must(t, apply(&pb.AuthDisableRequest{}))
	if rev() != 9 {
		t.Fatalf("revision after disable %d, want 9", rev())
	}
}

func TestRoleDeleteRemovesItFromUsers(t *testing.T) {
	st, apply := newTestStore(t, nil)
	setupRootAndAlice(t, apply)
	must(t, apply(&pb.AuthRoleDeleteRequest{Role: "reader"}))
	s, _ := st.Current()
	if roles := s.User("alice").Roles; len(roles) != 0 {
		t.Fatalf("alice still has %v", roles)
	}
}

func TestPermissionsMergeIntervalsAsEtcd(t *testing.T) {
	s := Initial()
	var err error
	step := func(req proto.Message) {
		t.Helper()
		if s, _, err = s.Apply(req, testEntropy); err != nil {
			t.Fatal(err)
		}
	}
	step(&pb.AuthRoleAddRequest{Name: "a"})
	step(&pb.AuthRoleAddRequest{Name: "b"})
	grant := func(role, key, end string, typ authpb.Permission_Type) {
		var e []byte
		if end != "" {
			e = []byte(end)
		}
		step(&pb.AuthRoleGrantPermissionRequest{Name: role, Perm: &authpb.Permission{PermType: typ, Key: []byte(key), RangeEnd: e}})
	}
	grant("a", "a", "c", authpb.Permission_READ)
	grant("b", "c", "e", authpb.Permission_READ)     // adjacent to [a, c): merged
	grant("b", "x", "\x00", authpb.Permission_WRITE) // every key from x on
	grant("a", "k", "", authpb.Permission_READWRITE) // one key
	step(&pb.AuthUserAddRequest{Name: "u", Options: &authpb.UserAddOptions{NoPassword: true}})
	step(&pb.AuthUserGrantRoleRequest{User: "u", Role: "a"})
	step(&pb.AuthUserGrantRoleRequest{User: "u", Role: "b"})
	p := NewPerms(s)
	R, W := authpb.Permission_READ, authpb.Permission_WRITE
	cases := []struct {
		key, end string
		typ      authpb.Permission_Type
		want     bool
	}{
		{"a", "", R, true},
		{"b", "", R, true},
		{"d", "", R, true},
		{"e", "", R, false},
		{"a", "e", R, true}, // across the two roles' intervals
		{"a", "f", R, false},
		{"0", "b", R, false},
		{"k", "", R, true},
		{"k", "", W, true},
		{"k", "k\x00", W, true},
		{"k", "l", W, false},
		{"x", "", W, true},
		{"zzz", "", W, true},
		{"x", "\x00", W, true}, // open-ended request inside an open-ended permission
		{"w", "\x00", W, false},
		{"x", "", R, false},
	}
	for _, c := range cases {
		if got := p.Permitted("u", []byte(c.key), []byte(c.end), c.typ); got != c.want {
			t.Errorf("Permitted(%q, %q, %v) = %v, want %v", c.key, c.end, c.typ, got, c.want)
		}
	}
	if p.Permitted("nobody", []byte("a"), nil, R) {
		t.Error("unknown user permitted")
	}
}

func TestStateEncodingRoundTripsAndRejectsGarbage(t *testing.T) {
	s := Initial()
	for _, req := range []proto.Message{
		&pb.AuthRoleAddRequest{Name: "r"},
		&pb.AuthUserAddRequest{Name: "u", HashedPassword: "aGFzaA=="},
		&pb.AuthUserGrantRoleRequest{User: "u", Role: "r"},
		&pb.AuthRoleGrantPermissionRequest{Name: "r", Perm: &authpb.Permission{Key: []byte("k"), RangeEnd: []byte("\x00")}},
	} {
		var err error
		if s, _, err = s.Apply(req, testEntropy); err != nil {
			t.Fatal(err)
		}
	}
	enc := s.Encode()
	got, err := Decode(enc)
	must(t, err)
	if !bytes.Equal(got.Encode(), enc) || got.Revision != s.Revision {
		t.Fatal("round trip changed the state")
	}
	for i := range enc {
		// Every truncation is an error, never a panic.
		if _, err := Decode(enc[:i]); i > 0 && err == nil {
			t.Fatalf("truncated to %d bytes: no error", i)
		}
	}
	if _, err := Decode([]byte{9, 9, 9}); !errors.Is(err, ErrCorruptState) {
		t.Fatalf("garbage: %v", err)
	}
}

func withToken(tok string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("token", tok))
}

func TestAuthenticateAndChecks(t *testing.T) {
	st, apply := newTestStore(t, nil)
	setupRootAndAlice(t, apply)
	_, err := st.Authenticate("alice", "alicepw")
	wantErr(t, err, rpctypes.ErrGRPCAuthNotEnabled)
	must(t, apply(&pb.AuthEnableRequest{}))
	_, err = st.Authenticate("alice", "wrong")
	wantErr(t, err, rpctypes.ErrGRPCAuthFailed)
	_, err = st.Authenticate("nobody", "x")
	wantErr(t, err, rpctypes.ErrGRPCAuthFailed)
	resp, err := st.Authenticate("alice", "alicepw")
	must(t, err)
	ai, err := st.AuthInfo(withToken(resp.Token))
	must(t, err)
	if ai.Username != "alice" {
		t.Fatalf("token of %q", ai.Username)
	}
	must(t, st.CheckRange(ai, []byte("/foo/a"), nil))
	wantErr(t, st.CheckPut(ai, []byte("/foo/a")), rpctypes.ErrGRPCPermissionDenied)
	must(t, st.CheckPut(ai, []byte("/bar")))
	wantErr(t, st.CheckAdmin(ai), rpctypes.ErrGRPCPermissionDenied)
	wantErr(t, st.CheckRange(nil, []byte("/foo/a"), nil), rpctypes.ErrGRPCUserEmpty)
	_, err = st.AuthInfo(withToken("forged.7"))
	wantErr(t, err, rpctypes.ErrGRPCInvalidAuthToken)
	// Changing alice's password voids her simple tokens, as in etcd.
	must(t, apply(&pb.AuthUserChangePasswordRequest{Name: "alice", Password: "new"}))
	_, err = st.AuthInfo(withToken(resp.Token))
	wantErr(t, err, rpctypes.ErrGRPCInvalidAuthToken)
}

// TestARightPasswordIsRememberedAndNothingElse: a password that succeeded
// is known right again without bcrypt (Remembered); a wrong one, another
// user's, or the old one after a password change, is not.
func TestARightPasswordIsRememberedAndNothingElse(t *testing.T) {
	st, apply := newTestStore(t, nil)
	setupRootAndAlice(t, apply)
	must(t, apply(&pb.AuthEnableRequest{}))
	if st.Remembered("alice", "alicepw") {
		t.Fatal("remembered before any login")
	}
	_, err := st.Authenticate("alice", "wrong")
	wantErr(t, err, rpctypes.ErrGRPCAuthFailed)
	_, err = st.Authenticate("alice", "alicepw")
	must(t, err)
	for _, tc := range []struct {
		user, password string
		want           bool
	}{{"alice", "alicepw", true}, {"alice", "wrong", false}, {"root", "alicepw", false}, {"nobody", "alicepw", false}} {
		if got := st.Remembered(tc.user, tc.password); got != tc.want {
			t.Errorf("Remembered(%s, %s) = %v, want %v", tc.user, tc.password, got, tc.want)
		}
	}
	must(t, apply(&pb.AuthUserChangePasswordRequest{Name: "alice", Password: "new"}))
	if st.Remembered("alice", "alicepw") {
		t.Fatal("the old password is remembered after a change")
	}
	_, err = st.Authenticate("alice", "alicepw")
	wantErr(t, err, rpctypes.ErrGRPCAuthFailed)
}

func TestNoPasswordUserCannotAuthenticate(t *testing.T) {
	st, apply := newTestStore(t, nil)
	setupRootAndAlice(t, apply)
	must(t, apply(&pb.AuthUserAddRequest{Name: "cn", Options: &authpb.UserAddOptions{NoPassword: true}}))
	must(t, apply(&pb.AuthEnableRequest{}))
	_, err := st.Authenticate("cn", "")
	if err == nil || err.Error() != errNoPasswordUser.Error() {
		t.Fatalf("error %v, want %v", err, errNoPasswordUser)
	}
}

// enabledState is a state with root and alice (password hash "h1"),
// enabled.
func enabledState(t *testing.T) *State {
	t.Helper()
	s := Initial()
	for _, req := range []proto.Message{
		&pb.AuthUserAddRequest{Name: "root", HashedPassword: "aDE="},
		&pb.AuthUserGrantRoleRequest{User: "root", Role: "root"},
		&pb.AuthUserAddRequest{Name: "alice", HashedPassword: "aDE="},
		&pb.AuthEnableRequest{},
	} {
		var err error
		if s, _, err = s.Apply(req, testEntropy); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestSimpleTokenExpiresAfterTTL(t *testing.T) {
	st := enabledState(t)
	tp := newSimpleTokens(300 * time.Millisecond)
	defer tp.Close()
	clk := testutil.NewClock()
	tp.now = clk.Now
	tok, err := tp.Assign("alice", st, 9)
	must(t, err)
	for i := 0; i < 4; i++ { // each use extends the lifetime
		clk.Advance(150 * time.Millisecond)
		if _, ok := tp.Info(tok, st); !ok {
			t.Fatalf("token invalid %d uses in", i)
		}
	}
	clk.Advance(450 * time.Millisecond)
	if _, ok := tp.Info(tok, st); ok {
		t.Fatal("token valid after its TTL")
	}
}

// TestForwardedSimpleTokenLivesByItsOriginsProofOfUse: an instance a
// request is forwarded to counts a simple token's idle lifetime from the
// proof of use its origin sends (Vouch): a token kept alive at the origin
// is valid there past its TTL since issue; a proof not made with the token
// key counts for nothing; a token idle past its TTL everywhere is refused
// with any proof, and its origin no longer vouches for it.
func TestForwardedSimpleTokenLivesByItsOriginsProofOfUse(t *testing.T) {
	st := enabledState(t)
	const ttl = time.Minute
	clk := testutil.NewClock()
	provider := func() *simpleTokens {
		tp := newSimpleTokens(ttl)
		tp.now = clk.Now
		t.Cleanup(tp.Close)
		return tp
	}
	origin, leader, other := provider(), provider(), provider()
	tok, err := origin.Assign("alice", st, 1)
	must(t, err)
	clk.Advance(ttl * 3 / 4)
	if _, ok := origin.Info(tok, st); !ok {
		t.Fatal("the token at its origin")
	}
	proof := origin.Vouch(tok, st)
	if proof == "" {
		t.Fatal("the origin does not vouch for a token it accepts")
	}
	clk.Advance(ttl / 2) // 1.25 TTL since issue, 0.5 since its last use
	if _, ok := other.Verify(tok, "", st); ok {
		t.Fatal("a token issued more than its TTL ago, never seen here, taken without a proof of use")
	}
	at, _, _ := strings.Cut(proof, ".")
	otherKey := &simpleTokens{local: []byte("another secret file, 32 bytes at least")}
	for name, bad := range map[string]string{
		"a forged MAC":           at + ".AAAAAAAAAAAAAAAAAAAAAA",
		"another key's MAC":      at + "." + base64.RawURLEncoding.EncodeToString(useMAC(otherKey.key(st), tok, at)),
		"another token's proof":  at + "." + base64.RawURLEncoding.EncodeToString(useMAC(origin.key(st), tok+"x", at)),
		"a proof without a time": "x." + strings.SplitN(proof, ".", 2)[1],
	} {
		if _, ok := other.Verify(tok, bad, st); ok {
			t.Errorf("%s: taken", name)
		}
	}
	if info, ok := leader.Verify(tok, proof, st); !ok || info.Username != "alice" {
		t.Fatalf("with its origin's proof of use: %+v %v", info, ok)
	}
	clk.Advance(2 * ttl)
	if origin.Vouch(tok, st) != "" {
		t.Fatal("the origin vouches for a token idle past its TTL")
	}
	if _, ok := leader.Verify(tok, proof, st); ok {
		t.Fatal("a token idle past its TTL taken with an old proof of use")
	}
	// An origin whose clock runs ahead by less than the TTL: its proof
	// counts as now, and only as long as a proof made now would; one
	// dated further ahead counts for nothing.
	proofAt := func(tok string, at time.Time) string {
		ms := strconv.FormatInt(at.UnixMilli(), 10)
		return ms + "." + base64.RawURLEncoding.EncodeToString(useMAC(origin.key(st), tok, ms))
	}
	tok2, err := origin.Assign("alice", st, 1)
	must(t, err)
	clk.Advance(ttl * 3 / 2)
	if _, ok := leader.Verify(tok2, proofAt(tok2, clk.Now().Add(ttl/2)), st); !ok {
		t.Fatal("a proof from an origin whose clock runs half a TTL ahead")
	}
	if _, ok := other.Verify(tok2, proofAt(tok2, clk.Now().Add(2*ttl)), st); ok {
		t.Fatal("a proof dated two TTLs ahead kept a token alive")
	}
	late := proofAt(tok2, clk.Now().Add(ttl/2))
	clk.Advance(ttl * 2)
	if _, ok := other.Verify(tok2, late, st); ok {
		t.Fatal("a proof from the future kept a token alive past its TTL")
	}
}

// TestRotatingTheSecretVoidsEverySimpleTokenAndNothingElse: Rotate gives
// an enabled state a new secret (tokens signed before are refused, new
// ones verify), keeps users, roles and the auth revision, and leaves a
// disabled state as it is.
func TestRotatingTheSecretVoidsEverySimpleTokenAndNothingElse(t *testing.T) {
	st := enabledState(t)
	tp := newSimpleTokens(time.Minute)
	defer tp.Close()
	old, err := tp.Assign("alice", st, 1)
	must(t, err)
	next, resp, err := Rotate(bytes.Repeat([]byte{3}, 32))(st.Encode())
	must(t, err)
	if next == nil || resp != nil {
		t.Fatalf("Rotate of an enabled state: %v %v", next, resp)
	}
	rotated, err := Decode(next)
	must(t, err)
	if !rotated.Enabled || rotated.Revision != st.Revision || rotated.User("alice") == nil || rotated.User("root") == nil {
		t.Fatalf("rotated state: enabled %v, revision %d (was %d)", rotated.Enabled, rotated.Revision, st.Revision)
	}
	if _, ok := tp.Info(old, rotated); ok {
		t.Fatal("a token signed with the former secret is valid")
	}
	fresh, err := tp.Assign("alice", rotated, 2)
	must(t, err)
	if _, ok := tp.Info(fresh, rotated); !ok {
		t.Fatal("a token signed with the new secret is refused")
	}
	disabled, _, err := st.Apply(&pb.AuthDisableRequest{}, nil)
	must(t, err)
	if next, _, err := Rotate(bytes.Repeat([]byte{3}, 32))(disabled.Encode()); err != nil || next != nil {
		t.Fatalf("Rotate of a disabled state: %v %v, want no change", next, err)
	}
	if _, _, err := Rotate([]byte("short"))(st.Encode()); err == nil {
		t.Fatal("Rotate with 5 bytes of entropy")
	}
}

func TestSimpleTokenIsValidOnEveryInstanceAndVoidedByChanges(t *testing.T) {
	st := enabledState(t)
	a, b := newSimpleTokens(time.Minute), newSimpleTokens(time.Minute)
	defer a.Close()
	defer b.Close()
	tok, err := a.Assign("alice", st, 1)
	must(t, err)
	if info, ok := b.Info(tok, st); !ok || info.Username != "alice" || info.Revision != st.Revision {
		t.Fatalf("another instance: %+v %v", info, ok)
	}
	// Tampering: another user's name with alice's signature, a cut token.
	parts := strings.Split(tok, ".")
	other := base64.RawURLEncoding.EncodeToString([]byte("root")) + "." + parts[1] + "." + parts[2]
	for _, bad := range []string{other, parts[0] + "." + parts[1], tok + "x", ""} {
		if _, ok := b.Info(bad, st); ok {
			t.Errorf("tampered token %q accepted", bad)
		}
	}
	changed, _, err := st.Apply(&pb.AuthUserChangePasswordRequest{Name: "alice", HashedPassword: "aDI="}, nil)
	must(t, err)
	if _, ok := b.Info(tok, changed); ok {
		t.Error("token valid after its user's password changed")
	}
	deleted, _, err := st.Apply(&pb.AuthUserDeleteRequest{Name: "alice"}, nil)
	must(t, err)
	if _, ok := b.Info(tok, deleted); ok {
		t.Error("token valid after its user was deleted")
	}
	disabled, _, err := st.Apply(&pb.AuthDisableRequest{}, nil)
	must(t, err)
	reenabled, _, err := disabled.Apply(&pb.AuthEnableRequest{}, bytes.Repeat([]byte{9}, 32))
	must(t, err)
	if _, ok := b.Info(tok, reenabled); ok {
		t.Error("token from before a disable valid after enabling again")
	}
}

func writeECKeys(t *testing.T) (pubFile, privFile string, key *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	der, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	pubDer, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	must(t, err)
	dir := t.TempDir()
	privFile, pubFile = filepath.Join(dir, "priv.pem"), filepath.Join(dir, "pub.pem")
	must(t, os.WriteFile(privFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600))
	must(t, os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDer}), 0o600))
	return pubFile, privFile, key
}

func TestJWTForgedExpiredAndOldTokensAreRefused(t *testing.T) {
	pub, priv, _ := writeECKeys(t)
	tp, err := NewTokenProvider("jwt,pub-key="+pub+",priv-key="+priv+",sign-method=ES256,ttl=1h", 0)
	must(t, err)
	st, apply := newTestStore(t, tp)
	setupRootAndAlice(t, apply)
	must(t, apply(&pb.AuthEnableRequest{}))
	resp, err := st.Authenticate("alice", "alicepw")
	must(t, err)
	ai, err := st.AuthInfo(withToken(resp.Token))
	must(t, err)
	must(t, st.CheckRange(ai, []byte("/foo/x"), nil))

	// Signed with another key.
	_, _, other := writeECKeys(t)
	forged, err := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"username": "root", "revision": 100, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(other)
	must(t, err)
	_, err = st.AuthInfo(withToken(forged))
	wantErr(t, err, rpctypes.ErrGRPCInvalidAuthToken)
	// Unsigned ("none") and HMAC with the public key as secret.
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"username": "root", "revision": 100}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	must(t, err)
	_, err = st.AuthInfo(withToken(none))
	wantErr(t, err, rpctypes.ErrGRPCInvalidAuthToken)
	pubPEM, _ := os.ReadFile(pub)
	hs, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"username": "root", "revision": 100}).SignedString(pubPEM)
	must(t, err)
	_, err = st.AuthInfo(withToken(hs))
	wantErr(t, err, rpctypes.ErrGRPCInvalidAuthToken)

	// Expired, though correctly signed.
	expTP, err := NewTokenProvider("jwt,pub-key="+pub+",priv-key="+priv+",sign-method=ES256,ttl=-1m", 0)
	must(t, err)
	old, err := expTP.Assign("alice", &State{Revision: 100}, 0)
	must(t, err)
	_, err = st.AuthInfo(withToken(old))
	wantErr(t, err, rpctypes.ErrGRPCInvalidAuthToken)

	// A change of the auth store makes earlier tokens old.
	must(t, apply(&pb.AuthRoleAddRequest{Name: "other"}))
	ai, err = st.AuthInfo(withToken(resp.Token))
	must(t, err)
	wantErr(t, st.CheckRange(ai, []byte("/foo/x"), nil), rpctypes.ErrGRPCAuthOldRevision)
}

func TestTokenOptionsAsEtcd(t *testing.T) {
	pub, priv, _ := writeECKeys(t)
	for _, bad := range []string{
		"bogus", "jwt,sign-method", "jwt,sign-method=ES256,sign-method=ES256", "jwt,sign-method=XX1,priv-key=" + priv,
		"jwt,sign-method=ES256", "jwt,sign-method=ES256,priv-key=/nonexistent",
		"jwt,sign-method=HS256",
	} {
		if _, err := NewTokenProvider(bad, 0); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// Public key only: verifies but cannot sign.
	tp, err := NewTokenProvider("jwt,pub-key="+pub+",sign-method=ES256", 0)
	must(t, err)
	if _, err := tp.Assign("u", Initial(), 0); !errors.Is(err, errVerifyOnly) {
		t.Fatalf("verify-only assign: %v", err)
	}
	// Mismatched pair.
	pub2, _, _ := writeECKeys(t)
	if _, err := NewTokenProvider("jwt,pub-key="+pub2+",priv-key="+priv+",sign-method=ES256", 0); err == nil {
		t.Fatal("mismatched keys accepted")
	}
}

func FuzzDecodeNeverPanics(f *testing.F) {
	s := Initial()
	s, _, _ = s.Apply(&pb.AuthRoleAddRequest{Name: "r"}, nil)
	s, _, _ = s.Apply(&pb.AuthUserAddRequest{Name: "u", HashedPassword: "aGFzaA=="}, nil)
	f.Add(s.Encode())
	f.Add([]byte{1, 1, 5, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := Decode(data)
		if err != nil {
			return
		}
		// What decodes re-encodes to something that decodes the same.
		again, err := Decode(st.Encode())
		if err != nil || again.Revision != st.Revision || again.Enabled != st.Enabled {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func TestUnknownUserLoginComparesAHashOfTheConfiguredCost(t *testing.T) {
	// Not a timing assertion: the login of a user that does not exist runs
	// bcrypt against a hash of the same cost as real users' hashes.
	st := NewStore((&memSource{}).src, Config{BcryptCost: 6})
	defer st.Close()
	if c, err := bcrypt.Cost(st.dummyHash()); err != nil || c != 6 {
		t.Fatalf("dummy hash cost %d, %v; want 6", c, err)
	}
	out := NewStore((&memSource{}).src, Config{BcryptCost: 99})
	defer out.Close()
	if out.BcryptCost() != bcrypt.DefaultCost {
		t.Fatal("an out-of-range cost is not bcrypt's default, as in etcd")
	}
}

// mintFromState forges a simple token for user from what the log holds
// alone (the state's secret and the user's hash), as a reader of
// ZooKeeper's data could.
func mintFromState(st *State, user string) string {
	issued := strconv.FormatInt(time.Now().UnixMilli(), 10)
	return base64.RawURLEncoding.EncodeToString([]byte(user)) + "." + issued + "." +
		base64.RawURLEncoding.EncodeToString(simpleMAC(st.secret, user, issued, st.User(user).Password))
}

func TestSimpleTokenMintedFromZooKeeperDataIsRefusedWithASecretFile(t *testing.T) {
	st := enabledState(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "token.secret")
	must(t, os.WriteFile(secret, []byte(strings.Repeat("k", 44)+"\n"), 0o600))
	plain, err := NewTokenProvider("simple", time.Minute)
	must(t, err)
	defer plain.Close()
	withFile, err := NewTokenProvider("simple,secret-file="+secret, time.Minute)
	must(t, err)
	defer withFile.Close()
	forged := mintFromState(st, "root")
	if _, ok := plain.Info(forged, st); !ok {
		t.Fatal("without a secret file a token minted from the state is accepted: the premise of this test")
	}
	if _, ok := withFile.Info(forged, st); ok {
		t.Fatal("with a secret file a token minted from ZooKeeper's data was accepted")
	}
	if LocalSecret(plain) || !LocalSecret(withFile) {
		t.Error("LocalSecret")
	}
	// Instances sharing the file honour each other's tokens; one without
	// it does not.
	other, err := NewTokenProvider("simple,secret-file="+secret, time.Minute)
	must(t, err)
	defer other.Close()
	tok, err := withFile.Assign("alice", st, 1)
	must(t, err)
	if _, ok := other.Info(tok, st); !ok {
		t.Error("an instance with the same secret file refused the token")
	}
	if _, ok := plain.Info(tok, st); ok {
		t.Error("an instance without the secret file accepted the token")
	}
	short := filepath.Join(dir, "short")
	must(t, os.WriteFile(short, []byte("tiny"), 0o600))
	if _, err := NewTokenProvider("simple,secret-file="+short, time.Minute); !errors.Is(err, ErrInvalidAuthOpts) {
		t.Errorf("a 4-byte secret: %v", err)
	}
	if _, err := NewTokenProvider("simple,ttl=1m", time.Minute); !errors.Is(err, ErrInvalidAuthOpts) {
		t.Errorf("an unknown simple option: %v", err)
	}
}
