package auth

import (
	"context"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"
)

// Caller is the credential a client presented with a request, as its
// instance received it, unverified: what travels with a request another
// instance forwards, so that the instance serving it checks it against its
// own auth state (see WithForwardedCaller).
type Caller struct {
	// Token is the client's token (gRPC metadata "token", or
	// "authorization" without its "Bearer " prefix); "" if none.
	Token string
	// CertCN is the common name of the client's verified certificate when
	// it authenticates (ClientCertAuth, no token, not the gateway's own
	// certificate); "" otherwise.
	CertCN string
	// Use, at the instance a request was forwarded to, is the forwarding
	// instance's proof that it accepted Token when it sent the request
	// (TokenProvider.Vouch, made then through VouchFrom): a simple token's
	// idle lifetime counts from it. "" for none. It is not part of the
	// caller's identity.
	Use string
}

// Empty reports whether c carries no credential.
func (c Caller) Empty() bool { return c.Token == "" && c.CertCN == "" }

// CallerOf returns the credential ctx's request presents, as AuthInfo
// would read it, without checking it (auth may be off).
func (s *Store) CallerOf(ctx context.Context) Caller {
	md, _ := metadata.FromIncomingContext(ctx)
	if tok, ok := tokenOf(md); ok {
		return Caller{Token: tok}
	}
	if !s.cfg.ClientCertAuth {
		return Caller{}
	}
	if ai := s.infoFromTLS(ctx, md, 0); ai != nil {
		return Caller{CertCN: ai.Username}
	}
	return Caller{}
}

// tokenOf returns the token of md, as etcd reads it.
func tokenOf(md metadata.MD) (string, bool) {
	ts, ok := md[rpctypes.TokenFieldNameGRPC]
	if !ok {
		ts, ok = md[rpctypes.TokenFieldNameSwagger]
	}
	if !ok || len(ts) == 0 {
		return "", false
	}
	return strings.TrimPrefix(ts[0], "Bearer "), true
}

type callerKey struct{}

// WithCaller returns a context carrying the caller of the request it
// serves, for the instance to forward with it (CallerFrom).
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller WithCaller attached to ctx (none: the
// instance itself, e.g. raising an alarm).
func CallerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// Voucher returns the function that makes this instance's proof that it
// accepts token at the moment it is called (TokenProvider.Vouch on the
// current state; "" when auth is off or the token is not valid here), for
// WithVouch.
func (s *Store) Voucher(token string) func() string {
	return func() string {
		st, _ := s.Current()
		if !st.Enabled {
			return ""
		}
		return s.cfg.Tokens.Vouch(token, st)
	}
}

type vouchKey struct{}

// WithVouch returns a context whose request, forwarded, carries the proof
// vouch makes when it is sent (VouchFrom): made only for the requests
// forwarded, and fresh at each send.
func WithVouch(ctx context.Context, vouch func() string) context.Context {
	return context.WithValue(ctx, vouchKey{}, vouch)
}

// VouchFrom returns the proof of use of the caller's token that the
// function WithVouch attached to ctx makes now, "" if none.
func VouchFrom(ctx context.Context) string {
	if v, ok := ctx.Value(vouchKey{}).(func() string); ok && v != nil {
		return v()
	}
	return ""
}

type forwardedKey struct{}

// WithForwardedCaller returns a context whose request is another
// instance's forward on behalf of c: AuthInfo then authenticates c, never
// the metadata or the certificate of the connection it arrived on. Its
// token is checked as the instance that received it checked it, a simple
// token's idle lifetime counted from the latest of its issue, its last use
// here and the use c.Use proves (TokenProvider.Verify); its CertCN is
// taken as is, so only a caller whose forwarding instance proved its own
// identity (mutual TLS) may carry one.
func WithForwardedCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, forwardedKey{}, c)
}

// forwardedInfo is AuthInfoAt for a forwarded caller: ok false if ctx
// carries none.
func (s *Store) forwardedInfo(ctx context.Context, st *State) (ai *Info, ok bool, err error) {
	c, ok := ctx.Value(forwardedKey{}).(Caller)
	if !ok {
		return nil, false, nil
	}
	switch {
	case c.Token != "":
		info, valid := s.cfg.Tokens.Verify(c.Token, c.Use, st)
		if !valid {
			return nil, true, rpctypes.ErrGRPCInvalidAuthToken
		}
		return &info, true, nil
	case c.CertCN != "" && s.cfg.ClientCertAuth:
		return &Info{Username: c.CertCN, Revision: st.Revision}, true, nil
	}
	return nil, true, nil
}
