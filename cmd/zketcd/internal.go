package main

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/zketcd/zketcd/embed"
)

// internalEndpoint checks --internal-listen-url, --advertise-internal-url
// and the peer TLS flags and sets them in cfg (the endpoint of write
// forwarding between instances, served with --forward-writes). embed
// refuses the combinations that are not safe (plaintext off loopback
// without --internal-insecure-plaintext, inconsistent peer TLS).
func (f *serveFlags) internalEndpoint(cfg *embed.Config) error {
	internal, secure, err := listenAddrs(splitList(f.internalListenURL))
	if err != nil {
		return fmt.Errorf("--internal-listen-url: %w", err)
	}
	peer := f.peer.peerTLS()
	if f.forwardWrites {
		switch {
		case len(internal) != 1:
			return errors.New("--internal-listen-url must be one URL")
		case secure && !peer.Enabled():
			return errors.New("--internal-listen-url is https://: give --peer-cert-file and --peer-key-file (or --peer-auto-tls)")
		case !secure && peer.Enabled():
			return fmt.Errorf("peer TLS is set but --internal-listen-url is http://: use https://%s", internal[0])
		}
	}
	if u := f.advertiseInternalURL; u != "" {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || (p.Path != "" && p.Path != "/") {
			return fmt.Errorf("--advertise-internal-url %q must be http:// or https://host:port", u)
		}
		if (p.Scheme == "https") != secure {
			return fmt.Errorf("--advertise-internal-url %q must have the scheme of --internal-listen-url", u)
		}
	}
	if len(internal) > 0 {
		cfg.InternalAddr = internal[0]
	}
	cfg.InternalURL = f.advertiseInternalURL
	cfg.Peer = peer
	cfg.InternalInsecurePlaintext = f.peer.insecurePlaintext
	return nil
}
