package testcerts

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"
)

// Peer writes a peer certificate from the CA for an instance's internal
// endpoint: common name cn, valid for hosts (IP addresses or names), with
// the server and the client usages (an instance dials its peers with its
// own certificate). It returns the certificate and key files.
func (s *Set) Peer(t testing.TB, cn string, hosts ...string) (certFile, keyFile string) {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, key := s.issue(t, tmpl)
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return writePEM(t, dir, cn+".pem", "CERTIFICATE", der), writePEM(t, dir, cn+"-key.pem", "PRIVATE KEY", kb)
}
