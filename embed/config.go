package embed

import (
	"crypto/tls"
	"errors"
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
	// MetricsAddrs are host:port addresses to serve /metrics and /health on.
	MetricsAddrs []string
	// EnablePprof serves net/http/pprof's handlers under /debug/pprof/ on
	// the client and metrics addresses (etcd's --enable-pprof).
	EnablePprof bool
	// InternalAddr is the host:port of the internal endpoint (write
	// forwarding and ReadIndex between instances, package forward; port 0
	// picks a free one), served when Engine.ForwardWrites is set ("":
	// DefaultInternalAddr). InternalURL is the URL advertised for it in the
	// member znode ("": http:// and the address listened on).
	InternalAddr string
	InternalURL  string
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
	return nil
}
