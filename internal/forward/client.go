package forward

import (
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/engine"
)

// Client is the calling side of the internal endpoint: a
// engine.Forwarder holding one connection per peer URL. Safe for
// concurrent use; Close it when the engine is closed.
type Client struct {
	// ConnectWait bounds how long a first send waits for a connection
	// before answering engine.ErrNotSent; CallTimeout bounds one attempt
	// (the engine sends a request of unknown outcome again).
	ConnectWait time.Duration
	CallTimeout time.Duration
	// TLS is the configuration https:// peers are dialed with (the peer
	// certificate this instance presents, the CA it verifies peers
	// against); nil: https:// peers cannot be reached. Set it before the
	// first call.
	TLS *tls.Config

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	// refusesCN holds the peer URLs that refused a request known by its
	// client's certificate name alone (noteRefusedCertNames).
	refusesCN map[string]bool
	closed    bool
}

var _ engine.Forwarder = (*Client)(nil)

// maxConns bounds the connections a Client keeps: one per peer URL seen,
// and a peer restarted with port 0 advertises a new URL each time.
const maxConns = 16

// Defaults of a Client's bounds.
const (
	DefaultConnectWait = time.Second
	DefaultCallTimeout = 10 * time.Second
)

// NewClient returns a Client with the default bounds.
func NewClient() *Client {
	return &Client{ConnectWait: DefaultConnectWait, CallTimeout: DefaultCallTimeout, conns: map[string]*grpc.ClientConn{}}
}

// Close closes every connection; later calls fail.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, cc := range c.conns {
		cc.Close()
	}
	c.conns = nil
}

func (c *Client) conn(url string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("forward client closed")
	}
	if cc := c.conns[url]; cc != nil {
		return cc, nil
	}
	t, secure, err := target(url)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if secure {
		if c.TLS == nil {
			return nil, fmt.Errorf("internal endpoint %s: https, and this instance has no peer TLS configuration (--peer-cert-file, --peer-key-file, --peer-trusted-ca-file or --peer-auto-tls)", url)
		}
		creds = credentials.NewTLS(c.TLS.Clone())
	}
	cc, err := grpc.NewClient(t,
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<31-1), grpc.MaxCallSendMsgSize(1<<31-1)),
	)
	if err != nil {
		return nil, fmt.Errorf("internal endpoint %s: %w", url, err)
	}
	if len(c.conns) >= maxConns {
		// Peers restarted on new ports: drop the connections of the others.
		for u, old := range c.conns {
			old.Close()
			delete(c.conns, u)
			delete(c.refusesCN, u)
		}
	}
	c.conns[url] = cc
	return cc, nil
}

// refusedCertNames reports whether the peer at url refused a request
// known by its client's certificate name alone (noteRefusedCertNames).
func (c *Client) refusedCertNames(url string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refusesCN[url]
}

// noteRefusedCertNames records that the peer at url refused a request
// known by its client's certificate name alone: auth is on there, and
// this link cannot carry the name. It stays so while the connection is
// kept (an auth disabled later only keeps such requests at their origin).
func (c *Client) noteRefusedCertNames(url string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refusesCN == nil {
		c.refusesCN = map[string]bool{}
	}
	c.refusesCN[url] = true
}

// carriesCertCN reports whether a peer at url can take a client's
// certificate name from this instance: the link is TLS and this instance
// presents a certificate (which the peer verifies, if it asks for one).
func (c *Client) carriesCertCN(url string) bool {
	_, secure, err := target(url)
	return err == nil && secure && c.TLS != nil && (len(c.TLS.Certificates) > 0 || c.TLS.GetClientCertificate != nil)
}

// ready waits up to ConnectWait for cc to be connected.
func (c *Client) ready(ctx context.Context, cc *grpc.ClientConn) bool {
	ctx, cancel := context.WithTimeout(ctx, c.ConnectWait)
	defer cancel()
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return true
		case connectivity.Idle:
			cc.Connect()
		case connectivity.TransientFailure, connectivity.Shutdown:
			return false // the peer refused or is gone: do not wait for a backoff
		}
		if !cc.WaitForStateChange(ctx, s) {
			return false
		}
	}
}

// Forward implements engine.Forwarder.
func (c *Client) Forward(ctx context.Context, to engine.Peer, call engine.ForwardCall) (engine.ForwardReply, error) {
	kind, ok := engine.WriteKindOf(call.Req)
	if !ok {
		return engine.ForwardReply{}, &engine.FinalError{Err: fmt.Errorf("zketcd: %T cannot be forwarded", call.Req)}
	}
	name := kind.Method
	cc, err := c.conn(to.URL)
	if err != nil {
		if call.Fresh {
			return engine.ForwardReply{}, fmt.Errorf("%w: %w", engine.ErrNotSent, err)
		}
		return engine.ForwardReply{}, err
	}
	if call.Fresh && !c.ready(ctx, cc) {
		return engine.ForwardReply{}, fmt.Errorf("%w: no connection to %s", engine.ErrNotSent, to.URL)
	}
	// A leader takes a client's certificate name only from a peer whose
	// certificate it verified: over another link, with auth on, it
	// refuses a request known by that name alone, and the origin commits
	// it itself. Sent, such a request cut in flight (a leader change, a
	// move's fence) could only be sent again and refused until its resend
	// limit. Once a peer refused one, the next are not sent to it: their
	// origin commits them at once.
	certOnly := false
	if cl := auth.CallerFrom(ctx); cl.Token == "" && cl.CertCN != "" && !c.carriesCertCN(to.URL) {
		certOnly = true
		if call.Fresh && c.refusedCertNames(to.URL) {
			return engine.ForwardReply{}, fmt.Errorf("%w: %s refuses the certificate name of the request's client over this link", engine.ErrNotSent, to.URL)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.CallTimeout)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(withCaller(ctx, to), mdOrigin, formatTag(call.Origin),
		mdAuth, strconv.FormatUint(call.AuthFP, 16))
	if call.Entropy != nil {
		ctx = metadata.AppendToOutgoingContext(ctx, mdEntropy, string(call.Entropy))
	}
	if call.After > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, mdAfter, strconv.FormatInt(call.After, 10))
	}
	var header, trailer metadata.MD
	err = cc.Invoke(ctx, "/"+serviceName+"/"+name, call.Req, call.Resp, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		switch first(trailer, mdOutcome) {
		case outcomeNotLeader:
			return engine.ForwardReply{}, engine.ErrNotLeader
		case outcomeAuthChanged:
			return engine.ForwardReply{}, engine.ErrAuthChanged
		case outcomeFailed:
			return engine.ForwardReply{}, &engine.FinalError{Err: err}
		case outcomeBadToken:
			// Refused before anything ran: a stale or misconfigured URL,
			// or a client known by a name this link cannot carry.
			if certOnly {
				c.noteRefusedCertNames(to.URL)
			}
			if call.Fresh {
				return engine.ForwardReply{}, fmt.Errorf("%w: %s refused the token: %w", engine.ErrNotSent, to.URL, err)
			}
		}
		if trailer.Get(mdOutcome) == nil {
			switch status.Code(err) {
			case codes.Unimplemented:
				// A leader of an older build that does not forward this
				// method: nothing ran there.
				if call.Fresh {
					return engine.ForwardReply{}, fmt.Errorf("%w: %s does not serve %s: %w", engine.ErrNotSent, to.URL, name, err)
				}
			case codes.PermissionDenied:
				// Refused from its headers (the token), before its message
				// was read: a stale or misconfigured URL.
				if call.Fresh {
					return engine.ForwardReply{}, fmt.Errorf("%w: %s refused the token: %w", engine.ErrNotSent, to.URL, err)
				}
			case codes.ResourceExhausted:
				// Refused from its length prefix (larger than the leader's
				// --max-request-bytes allows): nothing ran, and sending it
				// again cannot change that.
				return engine.ForwardReply{}, &engine.FinalError{Err: rpctypes.ErrGRPCRequestTooLarge}
			}
		}
		return engine.ForwardReply{}, fmt.Errorf("forward to %s: %w", to.URL, err)
	}
	lsn, err := strconv.ParseInt(first(header, mdLSN), 10, 64)
	if err != nil {
		return engine.ForwardReply{}, fmt.Errorf("forward to %s: answer without a log position", to.URL)
	}
	reply := engine.ForwardReply{LSN: lsn}
	if v := first(header, mdDup); v != "" {
		reply.Dup = true
		if reply.DupRev, err = strconv.ParseInt(v, 10, 64); err != nil {
			return engine.ForwardReply{}, fmt.Errorf("forward to %s: bad duplicate revision %q", to.URL, v)
		}
	}
	return reply, nil
}

// Call implements engine.Forwarder. A call for a client (k.RPC) carries
// the client's credential and is bounded by CallTimeout; ReadIndex
// carries only the peer's token.
func (c *Client) Call(ctx context.Context, to engine.Peer, k engine.CallKind, req, resp proto.Message) (int64, error) {
	cc, err := c.conn(to.URL)
	if err != nil {
		return 0, err
	}
	if k.RPC != "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.CallTimeout)
		defer cancel()
		ctx = withCaller(ctx, to)
	} else {
		ctx = metadata.AppendToOutgoingContext(ctx, mdToken, to.Token)
	}
	var header, trailer metadata.MD
	if err := cc.Invoke(ctx, "/"+serviceName+"/"+k.Method, req, resp, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		switch {
		case status.Code(err) == codes.Unimplemented:
			return 0, fmt.Errorf("%w: %s at %s: %w", engine.ErrUnsupported, k.Method, to.URL, err)
		case first(trailer, mdOutcome) == outcomeNotLeader:
			return 0, engine.ErrNotLeader
		}
		return 0, fmt.Errorf("%s at %s: %w", k.Method, to.URL, err)
	}
	if !k.Positioned {
		return 0, nil
	}
	lsn, err := strconv.ParseInt(first(header, mdLSN), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s at %s: answer without a log position", k.Method, to.URL)
	}
	return lsn, nil
}

// withCaller adds to ctx's outgoing metadata the peer's token and the
// credential of the client ctx's request came from (auth.CallerFrom), with
// this instance's proof that it accepts its token now (auth.VouchFrom),
// for the peer to check it against its own auth state.
func withCaller(ctx context.Context, to engine.Peer) context.Context {
	kv := []string{mdToken, to.Token}
	c := auth.CallerFrom(ctx)
	if c.Token != "" {
		kv = append(kv, mdCallerToken, c.Token)
	}
	if c.CertCN != "" {
		kv = append(kv, mdCallerCN, c.CertCN)
	}
	if use := auth.VouchFrom(ctx); use != "" && c.Token != "" {
		kv = append(kv, mdCallerUse, use)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// ForTenant returns a Forwarder that sends every call for cluster (a
// fleet's tenant) over c's connections, naming the cluster in the call's
// headers for a server with a Route.
func (c *Client) ForTenant(cluster string) engine.Forwarder {
	return tenantForwarder{c: c, cluster: cluster}
}

type tenantForwarder struct {
	c       *Client
	cluster string
}

func (t tenantForwarder) with(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, mdCluster, t.cluster)
}

func (t tenantForwarder) Forward(ctx context.Context, to engine.Peer, call engine.ForwardCall) (engine.ForwardReply, error) {
	return t.c.Forward(t.with(ctx), to, call)
}

func (t tenantForwarder) Call(ctx context.Context, to engine.Peer, k engine.CallKind, req, resp proto.Message) (int64, error) {
	return t.c.Call(t.with(ctx), to, k, req, resp)
}
