package kubelab

import (
	"fmt"

	"github.com/zketcd/zketcd/integration/faultproxy"
)

// StartProxy starts a re-pointable TCP (L4) proxy on 127.0.0.1 forwarding
// to target ("host:port") until the lab closes: the stand-in for the DNS
// name or virtual IP a store is reached at. Each connection is forwarded
// byte for byte, so TLS passes through and the target's certificate must
// be valid for 127.0.0.1. A cut-over is [faultproxy.Proxy.Hold] (every
// forwarded connection closed, new ones held) then
// [faultproxy.Proxy.Switch] to the new store.
func (l *Lab) StartProxy(target string) (*faultproxy.Proxy, error) {
	p, err := faultproxy.Start(target)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	l.Defer(func() { _ = p.Close() })
	return p, nil
}
