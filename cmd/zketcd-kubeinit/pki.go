package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The compose stack's TLS, as docs/kubernetes.md makes it with openssl: one
// CA signs zketcd's serving certificate and the client certificates of
// kube-apiserver and root, whose common names are their zketcd users.
const (
	// apiServerUser is kube-apiserver's user (its certificate's common name).
	apiServerUser = "kube-apiserver"
	// certValidity is how long the certificates are valid.
	certValidity = 825 * 24 * time.Hour
)

// serverNames are the names and addresses zketcd's certificate is valid
// for: its compose service name, and the host's loopback, where the stack
// publishes its client port.
var serverNames = []string{"zketcd", "localhost", "127.0.0.1"}

// pkiFiles lists the files pki writes: in the credentials directory
// (kube-apiserver's, and root's for the operator's etcdctl) and in zketcd's
// secrets directory.
var (
	credsPKI   = []string{"ca.crt", apiServerUser + ".crt", apiServerUser + ".key", "root.crt", "root.key"}
	secretsPKI = []string{"ca.crt", "zketcd.crt", "zketcd.key"}
)

// pki writes the CA, zketcd's serving certificate (into secretsDir, its
// key owned by uid:gid, zketcd's user) and the client certificates (into
// credsDir), unless every file exists: a new CA would not be trusted by
// the certificates already handed out. The CA's key is not kept; delete
// the files to have new ones made.
func pki(credsDir, secretsDir string, uid, gid int) error {
	complete := true
	for _, f := range credsPKI {
		complete = complete && exists(filepath.Join(credsDir, f))
	}
	for _, f := range secretsPKI {
		complete = complete && exists(filepath.Join(secretsDir, f))
	}
	if complete {
		return nil
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "zketcd compose CA"},
		NotBefore: now, NotAfter: now.Add(certValidity), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	issue := func(cn string, usage x509.ExtKeyUsage, names []string) (crt, key []byte, err error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
			NotBefore: now, NotAfter: now.Add(certValidity),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		for _, n := range names {
			if ip := net.ParseIP(n); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, n)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		kb, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), nil
	}
	if err := os.MkdirAll(credsDir, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(secretsDir, 0o700); err != nil {
		return err
	}
	for _, user := range []string{apiServerUser, "root"} {
		crt, key, err := issue(user, x509.ExtKeyUsageClientAuth, nil)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(credsDir, user+".crt"), crt, 0o644); err != nil {
			return err
		}
		if err := writeSecret(filepath.Join(credsDir, user+".key"), key); err != nil {
			return err
		}
	}
	crt, key, err := issue("zketcd", x509.ExtKeyUsageServerAuth, serverNames)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{filepath.Join(credsDir, "ca.crt"), caPEM, 0o644},
		{filepath.Join(secretsDir, "ca.crt"), caPEM, 0o644},
		{filepath.Join(secretsDir, "zketcd.crt"), crt, 0o644},
		{filepath.Join(secretsDir, "zketcd.key"), key, 0o600},
	} {
		if err := os.WriteFile(f.path, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(f.path, f.mode); err != nil {
			return err
		}
		if filepath.Dir(f.path) == secretsDir {
			if err := os.Lchown(f.path, uid, gid); err != nil && os.Geteuid() == 0 {
				return err
			}
		}
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// enableAuth turns etcd's authentication on at endpoint with root's
// certificate from credsDir, as docs/kubernetes.md's etcdctl commands do:
// the root role, users root and kube-apiserver without passwords (their
// certificates' common names authenticate them), both with the root role
// (kube-apiserver compacts, which etcd lets only root do). Nothing is done
// if authentication is on already. It retries for up to wait while zketcd
// cannot be reached.
func enableAuth(ctx context.Context, endpoint, credsDir string, wait time.Duration) error {
	cfg, err := clientTLS(credsDir, "root")
	if err != nil {
		return err
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var st *clientv3.AuthStatusResponse
	for {
		st, err = c.AuthStatus(ctx)
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return fmt.Errorf("auth status at %s: %w", endpoint, err)
	}
	if st.Enabled {
		fmt.Printf("authentication is on at %s already\n", endpoint)
		return nil
	}
	if _, err := c.RoleAdd(ctx, "root"); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("role add root: %w", err)
	}
	for _, u := range []string{"root", apiServerUser} {
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
	fmt.Printf("authentication on at %s: users root and %s (by their certificates), both with the root role\n", endpoint, apiServerUser)
	return nil
}

// clientTLS is a TLS client configuration trusting credsDir/ca.crt and
// presenting user's certificate from credsDir.
func clientTLS(credsDir, user string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(filepath.Join(credsDir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s/ca.crt: no certificate", credsDir)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(credsDir, user+".crt"), filepath.Join(credsDir, user+".key"))
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
