package embed

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/grpcsrv"
)

// Config configures an instance. It is the one configuration of zketcd:
// the zketcd command maps its flags onto it, and every setting has one
// owner that defaults and validates it — the ZooKeeper connection and the
// log's entry budget zkstore.Config (Engine.Store), the engine's tunables
// engine.Config, the etcd request limits (--max-request-bytes,
// --max-txn-ops) and the gRPC transport grpcsrv.Config. The logger is
// defaulted here only and handed to all three.
type Config struct {
	// Engine configures storage; its Logger, Store.Logger and Registerer
	// are filled in.
	Engine engine.Config
	// GRPC configures the gRPC services and etcd's request limits; its
	// Logger, Registerer and TLS are filled in.
	GRPC grpcsrv.Config
	// ClientAddrs are host:port addresses to serve the etcd API on
	// (port 0 picks a free one).
	ClientAddrs []string
	// TLS serves the client addresses with TLS when not nil.
	TLS *tls.Config
	// CORS and HostWhitelist are etcd's --cors and --host-whitelist for
	// the HTTP side of the client addresses (empty or "*": allow all).
	CORS, HostWhitelist []string
	// HTTPReadTimeout, HTTPWriteTimeout and HTTPIdleTimeout bound the
	// client addresses' HTTP side: the reading of a request (headers and
	// body), each write of a response or WebSocket message, an idle
	// connection (0: httpgw's defaults). MaxClientConnections bounds the
	// connections of the client addresses (0: the file descriptor limit
	// less 150, as etcd's; negative: unbounded).
	HTTPReadTimeout, HTTPWriteTimeout, HTTPIdleTimeout time.Duration
	MaxClientConnections                               int
	// MetricsAddrs are host:port addresses to serve /metrics and /health on
	// (and /debug/ with EnablePprof), their requests and idle connections
	// bounded by HTTPReadTimeout and HTTPIdleTimeout.
	MetricsAddrs []string
	// EnablePprof serves net/http/pprof's handlers under /debug/pprof/ on
	// the client and metrics addresses (etcd's --enable-pprof).
	EnablePprof bool
	// InternalAddr is the host:port of the internal endpoint (write
	// forwarding and ReadIndex between instances, package forward; port 0
	// picks a free one), served when Engine.ForwardWrites is set ("":
	// DefaultInternalAddr). InternalURL is the URL advertised for it in the
	// member znode ("": https:// with Peer TLS, else http://, and the
	// address listened on; its scheme must agree with Peer).
	InternalAddr string
	InternalURL  string
	// Peer serves the internal endpoint over TLS and dials the other
	// instances' https:// endpoints with it (etcd's --peer-* settings).
	Peer PeerTLS
	// InternalInsecurePlaintext lets the internal endpoint listen without
	// TLS on an address that is not loopback: forwarded writes, password
	// hashes and the callers' tokens then cross the network in clear.
	// Without it such a configuration is refused at start; with it the
	// start logs a warning.
	InternalInsecurePlaintext bool
	// Tenants serves the many tenants of a fleet root (StartFleet) instead
	// of one cluster.
	Tenants TenantsConfig
	// Logger receives structured logs (nil: logrus's standard logger).
	Logger *logrus.Entry
}

// DefaultInternalAddr is where the internal endpoint listens by default:
// the loopback interface only, so instances on other hosts must be given
// an address (and an advertised URL) they can reach.
const DefaultInternalAddr = "127.0.0.1:0"

// setDefaults fills the logger, once, into every part. The parts default
// their own settings when they start.
func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = logrus.NewEntry(logrus.StandardLogger())
	}
	if c.Engine.Logger == nil {
		c.Engine.Logger = c.Logger
	}
	if c.Engine.Store.Logger == nil {
		c.Engine.Store.Logger = c.Engine.Logger
	}
	if c.GRPC.Logger == nil {
		c.GRPC.Logger = c.Logger
	}
	if c.InternalAddr == "" {
		c.InternalAddr = DefaultInternalAddr
	}
}

// Validate reports the first invalid setting of the instance's own; the
// parts validate theirs when they start.
func (c *Config) Validate() error {
	if len(c.ClientAddrs) == 0 {
		return errors.New("no client address to serve on")
	}
	if !c.Engine.ForwardWrites {
		return nil
	}
	if err := c.Peer.validate(); err != nil {
		return err
	}
	if u := c.InternalURL; u != "" {
		if c.Peer.Enabled() && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("the internal endpoint is served over TLS (peer TLS is set): its advertised URL %q must be https://", u)
		}
		if !c.Peer.Enabled() && !strings.HasPrefix(u, "http://") {
			return fmt.Errorf("the advertised internal URL %q is not http://: serving https:// needs --peer-cert-file and --peer-key-file (or --peer-auto-tls)", u)
		}
	}
	if !c.Peer.Enabled() && !isLoopback(c.InternalAddr) && !c.InternalInsecurePlaintext {
		return fmt.Errorf("the internal endpoint would listen on %s without TLS: forwarded writes, password hashes and the clients' tokens would cross the network in clear, "+
			"and any host that reaches it could pose as an instance. Serve it over TLS: --internal-listen-url https://%s with --peer-cert-file, --peer-key-file, "+
			"--peer-trusted-ca-file and --peer-client-cert-auth (a certificate per instance signed by one CA; or --peer-auto-tls for encryption without verified identities); "+
			"or listen on 127.0.0.1 (one host only); or set --internal-insecure-plaintext to accept plaintext on a network you trust", c.InternalAddr, c.InternalAddr)
	}
	return nil
}
