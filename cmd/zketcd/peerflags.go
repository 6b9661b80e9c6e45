package main

import (
	"flag"

	"github.com/zketcd/zketcd/embed"
)

// peerFlags are etcd's peer transport flags, which secure zketcd's
// internal endpoint between instances (etcd's peer port), and
// --internal-insecure-plaintext.
type peerFlags struct {
	certFile, keyFile, trustedCAFile string
	clientCertAuth, autoTLS          bool
	allowedCN, allowedHostname       string
	insecurePlaintext                bool
}

// peerTLSKeys map the keys of etcd's peer-transport-security section that
// zketcd has to their flags.
var peerTLSKeys = map[string]string{
	"cert-file": "peer-cert-file", "key-file": "peer-key-file", "trusted-ca-file": "peer-trusted-ca-file",
	"client-cert-auth": "peer-client-cert-auth", "auto-tls": "peer-auto-tls",
	"allowed-cn": "peer-cert-allowed-cn", "allowed-hostname": "peer-cert-allowed-hostname",
}

func (f *peerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.certFile, "peer-cert-file", "", "TLS certificate of the internal endpoint, also presented when dialing the other instances (needs the server and client usages)")
	fs.StringVar(&f.keyFile, "peer-key-file", "", "key of --peer-cert-file")
	fs.StringVar(&f.trustedCAFile, "peer-trusted-ca-file", "", "CA bundle the other instances' certificates are verified against, both ways; as in etcd, setting it makes the internal endpoint require a client certificate")
	fs.BoolVar(&f.clientCertAuth, "peer-client-cert-auth", false, "require a client certificate signed by --peer-trusted-ca-file from every instance calling the internal endpoint")
	fs.StringVar(&f.allowedCN, "peer-cert-allowed-cn", "", "comma-separated common names a peer certificate must have one of (both ways)")
	fs.StringVar(&f.allowedHostname, "peer-cert-allowed-hostname", "", "comma-separated host names a peer certificate must be valid for one of (both ways)")
	fs.BoolVar(&f.autoTLS, "peer-auto-tls", false, "serve the internal endpoint with a self-signed certificate made at start and dial the other instances without verifying theirs: encrypted, no verified identities (ignored with --peer-cert-file)")
	fs.BoolVar(&f.insecurePlaintext, "internal-insecure-plaintext", false, "accept an http:// --internal-listen-url on an address that is not loopback: forwarded writes, password hashes and the clients' tokens then cross the network in clear (warned at every start)")
}

// peerTLS is the embed configuration of the flags; embed validates it.
func (f *peerFlags) peerTLS() embed.PeerTLS {
	return embed.PeerTLS{
		CertFile: f.certFile, KeyFile: f.keyFile, TrustedCAFile: f.trustedCAFile,
		ClientCertAuth: f.clientCertAuth, AutoTLS: f.autoTLS,
		AllowedCNs: splitList(f.allowedCN), AllowedHostnames: splitList(f.allowedHostname),
	}
}
