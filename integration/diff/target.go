package diff

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/integration/etcdoracle"
)

// Target is a running etcd-API server.
type Target interface {
	// Name identifies the target in reports, e.g. "etcd" or "zketcd".
	Name() string
	// Client returns a client connected to the target. The target (or the
	// test's cleanup) owns the client and closes it.
	Client(t testing.TB) *clientv3.Client
}

// Factory starts a fresh, empty target (at revision 1) for one scenario and
// arranges, through t.Cleanup, for it to be stopped.
type Factory func(t testing.TB) Target

// EtcdFactory returns a Factory starting embedded etcd servers (the
// oracle) configured by opts.
func EtcdFactory(opts ...etcdoracle.Option) Factory {
	return func(t testing.TB) Target {
		return etcdoracle.Start(t, opts...)
	}
}

// EndpointFactory adapts a function that starts a server and returns its
// client endpoint (host:port) into a Factory. It is the shortest way to add
// a target: the function starts the server on fresh storage, registers its
// shutdown with t.Cleanup, and returns where it listens.
func EndpointFactory(name string, start func(t testing.TB) (endpoint string)) Factory {
	return func(t testing.TB) Target {
		return endpointTarget{name: name, endpoint: start(t)}
	}
}

type endpointTarget struct {
	name     string
	endpoint string
}

func (e endpointTarget) Name() string { return e.name }

func (e endpointTarget) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return etcdoracle.NewClient(t, e.endpoint)
}
