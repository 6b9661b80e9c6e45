// Package testcerts makes a throw-away CA and certificates for TLS tests.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Set is a CA with a server certificate (for 127.0.0.1 and localhost) and
// a client certificate, written as PEM files in a test's temp dir.
type Set struct {
	CAFile, ServerCert, ServerKey, ClientCert, ClientKey string
	CA                                                   *x509.CertPool

	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

// New writes a fresh set under t.TempDir().
func New(t testing.TB) *Set {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "zketcd test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	s := &Set{CA: x509.NewCertPool(), caCert: ca, caKey: caKey}
	s.CA.AddCert(ca)
	s.CAFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "PRIVATE KEY", kb)
	}
	s.ServerCert, s.ServerKey = issue("server", 2, x509.ExtKeyUsageServerAuth)
	s.ClientCert, s.ClientKey = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return s
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ServerTLS returns a server config requiring client certificates from the CA.
func (s *Set) ServerTLS(t testing.TB) *tls.Config {
	cert, err := tls.LoadX509KeyPair(s.ServerCert, s.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: s.CA,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

// ClientTLS returns a client config trusting the CA, with the client
// certificate if withCert.
func (s *Set) ClientTLS(t testing.TB, withCert bool) *tls.Config {
	cfg := &tls.Config{RootCAs: s.CA, MinVersion: tls.VersionTLS12}
	if withCert {
		cert, err := tls.LoadX509KeyPair(s.ClientCert, s.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// ClientWithSubject returns a client certificate from the CA with the
// given subject (a ZooKeeper x509 identity, a CN-based etcd user).
func (s *Set) ClientWithSubject(t testing.TB, subject pkix.Name) tls.Certificate {
	t.Helper()
	der, key := s.issue(t, &x509.Certificate{
		Subject: subject, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// issue signs tmpl for a new P-256 key with the CA, after filling in a
// random serial number and a validity from an hour ago to a day ahead.
func (s *Set) issue(t testing.TB, tmpl *x509.Certificate) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, big.NewInt(1<<62)); err != nil {
		t.Fatal(err)
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.caCert, &key.PublicKey, s.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}
