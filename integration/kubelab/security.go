package kubelab

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Security is the secure shape of docs/kubernetes.md that every zketcd of
// the lab runs in: client TLS with client certificates required
// (--client-cert-auth), etcd's authentication on with each certificate's
// common name as its user, and a ZooKeeper identity every znode of the
// root is ACLed to. All paths are PEM or identity files.
type Security struct {
	// CAFile signs every certificate below (--trusted-ca-file,
	// kube-apiserver's --etcd-cafile).
	CAFile string
	// ServerCert and ServerKey are zketcd's serving certificate, valid for
	// 127.0.0.1 and localhost (--cert-file, --key-file).
	ServerCert, ServerKey string
	// InstanceCerts, if it names an instance, holds that instance's own
	// serving certificate and key instead.
	InstanceCerts map[string][2]string
	// APIServerCert and APIServerKey are kube-apiserver's client
	// certificate, common name APIServerUser (--etcd-certfile,
	// --etcd-keyfile).
	APIServerCert, APIServerKey string
	// RootCert and RootKey are the operator's client certificate, common
	// name root (etcdctl, backups, the tests' own clients).
	RootCert, RootKey string
	// ZKAuthFile holds the ZooKeeper identity (--zk-auth-file), a digest
	// identity: digest:zketcd:<password>.
	ZKAuthFile string

	// The CA's certificate and key, to issue more client certificates
	// (IssueClient); nil in a Security made from files.
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	mu     sync.Mutex
	serial int64
}

// APIServerUser is the zketcd user kube-apiserver's certificate names
// (its common name). It has the root role: kube-apiserver compacts (its
// --etcd-compaction-interval), and etcd lets only root compact.
const APIServerUser = "kube-apiserver"

// NewSecurity writes a throw-away CA, zketcd's serving certificate, the
// client certificates of kube-apiserver and root, and a random ZooKeeper
// identity into dir (docs/kubernetes.md makes the same with openssl).
func NewSecurity(dir string) (*Security, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "zketcd kubelab CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	s := &Security{CAFile: filepath.Join(dir, "ca.crt"), ZKAuthFile: filepath.Join(dir, "zk-auth"), dir: dir, ca: ca, caKey: caKey, serial: 1}
	if err := writePEM(s.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	issue := s.issue
	if s.ServerCert, s.ServerKey, err = issue("zketcd", "zketcd", x509.ExtKeyUsageServerAuth, true); err != nil {
		return nil, err
	}
	if s.APIServerCert, s.APIServerKey, err = issue(APIServerUser, APIServerUser, x509.ExtKeyUsageClientAuth, false); err != nil {
		return nil, err
	}
	if s.RootCert, s.RootKey, err = issue("root", "root", x509.ExtKeyUsageClientAuth, false); err != nil {
		return nil, err
	}
	pw := make([]byte, 24)
	if _, err := rand.Read(pw); err != nil {
		return nil, err
	}
	if err := os.WriteFile(s.ZKAuthFile, []byte("digest:zketcd:"+hex.EncodeToString(pw)+"\n"), 0o600); err != nil {
		return nil, err
	}
	return s, nil
}

// issue writes a certificate with common name cn signed by the CA, and its
// key, as dir/<name>.crt and dir/<name>.key; server certificates are valid
// for 127.0.0.1 and localhost.
func (s *Security) issue(name, cn string, usage x509.ExtKeyUsage, server bool) (string, string, error) {
	if s.ca == nil {
		return "", "", errors.New("this Security was made from files: it holds no CA key to issue certificates with")
	}
	s.mu.Lock()
	s.serial++
	serial := s.serial
	s.mu.Unlock()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	if server {
		tmpl.IPAddresses, tmpl.DNSNames = []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, &key.PublicKey, s.caKey)
	if err != nil {
		return "", "", err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	crt, k := filepath.Join(s.dir, name+".crt"), filepath.Join(s.dir, name+".key")
	if err := writePEM(crt, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	return crt, k, writePEM(k, "PRIVATE KEY", kb)
}

// IssueClient writes a client certificate whose common name is cn (a
// tenant of a fleet, a user) and its key, and returns their paths. Safe
// for concurrent use; it fails on a Security made from files.
func (s *Security) IssueClient(cn string) (cert, key string, err error) {
	return s.issue("client-"+cn, cn, x509.ExtKeyUsageClientAuth, false)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// ServingPair returns the serving certificate and key of instance name.
func (s *Security) ServingPair(name string) (cert, key string) {
	if p, ok := s.InstanceCerts[name]; ok {
		return p[0], p[1]
	}
	return s.ServerCert, s.ServerKey
}

// ZKIdentity returns the identity ZKAuthFile holds (for zkstore.Config.Auth).
func (s *Security) ZKIdentity() (string, error) {
	b, err := os.ReadFile(s.ZKAuthFile)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// ClientTLS returns a client TLS configuration trusting CAFile and
// presenting cert and key.
func (s *Security) ClientTLS(cert, key string) (*tls.Config, error) {
	pemCA, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		return nil, fmt.Errorf("%s: no certificate", s.CAFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg, nil
}

// EnableAuth turns etcd's authentication on at endpoint, as the etcdctl
// commands of docs/kubernetes.md do: users root and APIServerUser without
// passwords (their client certificates' common names authenticate them),
// both with the root role. It does nothing if authentication is on.
func (s *Security) EnableAuth(ctx context.Context, endpoint string) error {
	cfg, err := s.ClientTLS(s.RootCert, s.RootKey)
	if err != nil {
		return err
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := c.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("auth status: %w", err)
	}
	if st.Enabled {
		return nil
	}
	if _, err := c.RoleAdd(ctx, "root"); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("role add root: %w", err)
	}
	for _, u := range []string{"root", APIServerUser} {
		if _, err := c.UserAddWithOptions(ctx, u, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
			return fmt.Errorf("user add %s: %w", u, err)
		}
		if _, err := c.UserGrantRole(ctx, u, "root"); err != nil {
			return fmt.Errorf("user grant-role %s root: %w", u, err)
		}
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		return fmt.Errorf("auth enable: %w", err)
	}
	return nil
}
