package embed

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"time"
)

// PeerTLS secures the internal endpoint between instances, with etcd's
// peer transport settings and their meanings. With a certificate (or
// AutoTLS) the endpoint is served over TLS and its URL is https://; the
// instance dials https:// peers with the same certificate as its client
// certificate, so a peer certificate carries both the server and the
// client usage, as etcd's do.
type PeerTLS struct {
	// CertFile and KeyFile are the instance's peer certificate and key
	// (etcd's --peer-cert-file, --peer-key-file).
	CertFile, KeyFile string
	// TrustedCAFile is the CA bundle peers are verified against, both the
	// peers that dial this instance (their client certificates: as in
	// etcd, setting it makes the endpoint require one) and the peers it
	// dials (etcd's --peer-trusted-ca-file). Empty: the system's roots
	// verify the peers this instance dials, and dialing peers need no
	// certificate.
	TrustedCAFile string
	// ClientCertAuth makes the endpoint require a client certificate
	// signed by TrustedCAFile from every peer (etcd's
	// --peer-client-cert-auth). Only requests from such a verified peer
	// may carry a client-certificate identity (a user authenticated by
	// --client-cert-auth where the request entered).
	ClientCertAuth bool
	// AllowedCNs and AllowedHostnames, if set, also require a verified
	// peer certificate (either way) to have one of these common names, or
	// to be valid for one of these host names (etcd's
	// --peer-cert-allowed-cn, --peer-cert-allowed-hostname; at most one of
	// the two).
	AllowedCNs, AllowedHostnames []string
	// AutoTLS, without CertFile and KeyFile, serves the endpoint with a
	// self-signed certificate made at start and dials peers without
	// verifying theirs (etcd's --peer-auto-tls): the traffic is encrypted
	// but no peer's identity is proved, so it cannot be combined with the
	// verification settings. With CertFile and KeyFile it is ignored, as
	// in etcd.
	AutoTLS bool
}

// Enabled reports whether the internal endpoint is served over TLS.
func (p PeerTLS) Enabled() bool { return p.CertFile != "" || p.KeyFile != "" || p.AutoTLS }

// selfSigned reports whether the endpoint serves a certificate made at start.
func (p PeerTLS) selfSigned() bool { return p.AutoTLS && p.CertFile == "" && p.KeyFile == "" }

// validate reports the first inconsistent setting, naming the flags.
func (p PeerTLS) validate() error {
	switch {
	case (p.CertFile == "") != (p.KeyFile == ""):
		return errors.New("--peer-cert-file and --peer-key-file go together")
	case len(p.AllowedCNs) > 0 && len(p.AllowedHostnames) > 0:
		return errors.New("--peer-cert-allowed-cn and --peer-cert-allowed-hostname cannot both be set (as in etcd)")
	case p.selfSigned() && (p.TrustedCAFile != "" || p.ClientCertAuth || len(p.AllowedCNs) > 0 || len(p.AllowedHostnames) > 0):
		return errors.New("--peer-auto-tls makes a self-signed certificate that no peer can verify: it cannot be combined with --peer-trusted-ca-file, --peer-client-cert-auth or --peer-cert-allowed-*; give every instance --peer-cert-file and --peer-key-file signed by the --peer-trusted-ca-file instead")
	case !p.Enabled() && (p.TrustedCAFile != "" || p.ClientCertAuth || len(p.AllowedCNs) > 0 || len(p.AllowedHostnames) > 0):
		return errors.New("--peer-trusted-ca-file, --peer-client-cert-auth and --peer-cert-allowed-* need --peer-cert-file and --peer-key-file")
	case p.ClientCertAuth && p.TrustedCAFile == "":
		return errors.New("--peer-client-cert-auth needs --peer-trusted-ca-file")
	case (len(p.AllowedCNs) > 0 || len(p.AllowedHostnames) > 0) && p.TrustedCAFile == "":
		return errors.New("--peer-cert-allowed-cn and --peer-cert-allowed-hostname need --peer-trusted-ca-file (they restrict verified certificates)")
	}
	return nil
}

// configs returns the TLS configurations the endpoint serves with and
// dials peers with. hosts are the names and addresses a self-signed
// certificate is made for.
func (p PeerTLS) configs(hosts []string) (server, client *tls.Config, err error) {
	if err := p.validate(); err != nil {
		return nil, nil, err
	}
	var cert tls.Certificate
	if p.selfSigned() {
		if cert, err = selfSignedCert(hosts); err != nil {
			return nil, nil, fmt.Errorf("--peer-auto-tls: %w", err)
		}
	} else if cert, err = tls.LoadX509KeyPair(p.CertFile, p.KeyFile); err != nil {
		return nil, nil, fmt.Errorf("load --peer-cert-file/--peer-key-file: %w", err)
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if p.selfSigned() {
		client.InsecureSkipVerify = true // etcd's meaning: encryption, no verified identity
		return server, client, nil
	}
	if p.TrustedCAFile != "" {
		pem, err := os.ReadFile(p.TrustedCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("read --peer-trusted-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--peer-trusted-ca-file %s: no certificates", p.TrustedCAFile)
		}
		server.ClientCAs, server.ClientAuth = pool, tls.RequireAndVerifyClientCert
		client.RootCAs = pool
	}
	if allowed := p.allowed(); allowed != nil {
		server.VerifyPeerCertificate, client.VerifyPeerCertificate = allowed, allowed
	}
	return server, client, nil
}

// allowed is the check of AllowedCNs or AllowedHostnames on a verified
// chain (nil: neither set).
func (p PeerTLS) allowed() func([][]byte, [][]*x509.Certificate) error {
	var ok func(*x509.Certificate) bool
	switch {
	case len(p.AllowedCNs) > 0:
		ok = func(c *x509.Certificate) bool {
			for _, cn := range p.AllowedCNs {
				if c.Subject.CommonName == cn {
					return true
				}
			}
			return false
		}
	case len(p.AllowedHostnames) > 0:
		ok = func(c *x509.Certificate) bool {
			for _, h := range p.AllowedHostnames {
				if c.VerifyHostname(h) == nil {
					return true
				}
			}
			return false
		}
	default:
		return nil
	}
	return func(_ [][]byte, chains [][]*x509.Certificate) error {
		for _, chain := range chains {
			if len(chain) > 0 && ok(chain[0]) {
				return nil
			}
		}
		return errors.New("zketcd: peer certificate not allowed by --peer-cert-allowed-cn/--peer-cert-allowed-hostname")
	}
}

// selfSignedCert makes a self-signed ECDSA certificate valid for hosts
// (names or IP addresses) for a year, with the server and client usages.
func selfSignedCert(hosts []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{Organization: []string{"zketcd"}, CommonName: "zketcd peer (auto TLS)"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// isLoopback reports whether host:port (or a bare host) listens on the
// loopback interface only: a loopback IP, or localhost.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// internalHosts are the hosts a self-signed peer certificate is made for:
// the address listened on and the advertised URL's host.
func internalHosts(listen net.Addr, advertised string) []string {
	var hosts []string
	if h, _, err := net.SplitHostPort(listen.String()); err == nil {
		hosts = append(hosts, h)
	}
	if u, err := url.Parse(advertised); err == nil && u.Hostname() != "" {
		hosts = append(hosts, u.Hostname())
	}
	return hosts
}

// warnInternalSecurity logs, at every start, what the internal endpoint's
// configuration leaves open.
func warnInternalSecurity(cfg Config, addr string) {
	lg := cfg.Logger.WithField("addr", addr)
	switch {
	case !cfg.Peer.Enabled() && !isLoopback(addr):
		lg.Warn("the internal endpoint listens without TLS on a non-loopback address (--internal-insecure-plaintext): forwarded writes, password hashes and the clients' tokens cross the network in clear; set --peer-cert-file, --peer-key-file, --peer-trusted-ca-file and --peer-client-cert-auth")
	case cfg.Peer.selfSigned():
		lg.Warn("the internal endpoint uses a self-signed certificate (--peer-auto-tls): encrypted, but no peer's identity is verified")
	case cfg.Peer.Enabled() && cfg.Peer.TrustedCAFile == "":
		lg.Warn("the internal endpoint does not verify the instances that call it (no --peer-trusted-ca-file): only its token keeps other hosts out")
	}
	if cfg.Peer.AutoTLS && !cfg.Peer.selfSigned() {
		lg.Warn("--peer-auto-tls is ignored: --peer-cert-file and --peer-key-file are given")
	}
}
