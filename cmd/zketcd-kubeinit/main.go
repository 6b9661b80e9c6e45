// Command zketcd-kubeinit is the helper of docker-compose.yml (it ships in
// the zketcd image):
//
//	zketcd-kubeinit creds DIR   write what kube-apiserver needs into DIR, unless present:
//	                            tokens.csv (a bearer token in system:masters), token (the
//	                            token alone, for kubectl/curl), sa.key and sa.pub (the
//	                            service account signing key pair); and copy this
//	                            static binary to DIR/zketcd-kubeinit. With
//	                            ZKETCD_SECRETS_DIR also zketcd's secrets and the TLS of
//	                            the stack: a CA, zketcd's serving certificate (secrets
//	                            directory), kube-apiserver's and root's client
//	                            certificates (DIR: ca.crt, kube-apiserver.crt/.key,
//	                            root.crt/.key)
//	zketcd-kubeinit auth URL DIR
//	                            turn etcd's authentication on at zketcd's URL with
//	                            root's certificate from DIR: users root and
//	                            kube-apiserver (their certificates' common names)
//	zketcd-kubeinit probe URL   exit 0 if GET URL answers 200 within 5s (https is not
//	                            verified: kube-apiserver's certificate is self-signed)
//
// probe is the healthcheck of the zketcd and kube-apiserver containers:
// neither image has a shell or curl, and the copy in DIR reaches the
// kube-apiserver container through the shared volume.
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

func main() {
	if len(os.Args) < 3 || (os.Args[1] == "auth") != (len(os.Args) == 4) || len(os.Args) > 4 {
		fmt.Fprintln(os.Stderr, "usage: zketcd-kubeinit creds DIR | auth URL DIR | probe URL")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "creds":
		err = creds(os.Args[2])
	case "auth":
		err = enableAuth(context.Background(), os.Args[2], os.Args[3], 2*time.Minute)
	case "probe":
		err = probe(os.Args[2], 5*time.Second)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "zketcd-kubeinit:", err)
		os.Exit(1)
	}
}

// writeSecret writes data to path readable by its owner only, whatever the
// umask and whatever mode an existing file had.
func writeSecret(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}

// zketcd's own secrets: with ZKETCD_SECRETS_DIR set, creds also writes
// there the ZooKeeper identity zketcd ACLs its znodes to (zk-auth, for
// --zk-auth-file) and the key of its simple tokens (token.secret, for
// --auth-token simple,secret-file=), owned by ZKETCD_SECRETS_OWNER
// ("uid:gid"; default the image's nonroot user, which zketcd runs as).
const (
	secretsDirEnv   = "ZKETCD_SECRETS_DIR"
	secretsOwnerEnv = "ZKETCD_SECRETS_OWNER"
	nonrootOwner    = "65532:65532"
)

// zketcdSecrets writes zk-auth and token.secret into dir unless they
// exist, 0600 and owned by owner, and the stack's certificates (pki): the
// serving ones into dir, the clients' into credsDir.
func zketcdSecrets(dir, credsDir, owner string) error {
	if owner == "" {
		owner = nonrootOwner
	}
	var uid, gid int
	if _, err := fmt.Sscanf(owner, "%d:%d", &uid, &gid); err != nil {
		return fmt.Errorf("%s %q: want uid:gid", secretsOwnerEnv, owner)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	random := func() (string, error) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		return hex.EncodeToString(b), nil
	}
	for name, prefix := range map[string]string{"zk-auth": "digest:zketcd:", "token.secret": ""} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			r, err := random()
			if err != nil {
				return err
			}
			if err := writeSecret(p, []byte(prefix+r+"\n")); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if err := os.Chmod(p, 0o600); err != nil {
			return err
		}
		if err := os.Lchown(p, uid, gid); err != nil && os.Geteuid() == 0 {
			return err
		}
	}
	if err := pki(credsDir, dir, uid, gid); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	if err := os.Lchown(dir, uid, gid); err != nil && os.Geteuid() == 0 {
		return err
	}
	return nil
}

// creds writes the credentials into dir, keeping files that exist (so a
// restart of the compose project keeps its token and keys).
func creds(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tokenPath := filepath.Join(dir, "token")
	token, err := os.ReadFile(tokenPath)
	if errors.Is(err, os.ErrNotExist) {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		token = []byte(hex.EncodeToString(b))
		if err := writeSecret(tokenPath, token); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	// The token is worth system:masters: only its owner reads it (a file
	// of an earlier run, written 0644, is closed too).
	if err := os.Chmod(tokenPath, 0o600); err != nil {
		return err
	}
	if err := writeSecret(filepath.Join(dir, "tokens.csv"), []byte(string(token)+",admin,admin-uid,system:masters\n")); err != nil {
		return err
	}
	keyPath, pubPath := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if _, err := os.Stat(keyPath); errors.Is(err, os.ErrNotExist) {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return err
		}
		pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			return err
		}
		if err := writeSecret(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})); err != nil {
			return err
		}
		if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
			return err
		}
	}
	if d := os.Getenv(secretsDirEnv); d != "" {
		if err := zketcdSecrets(d, dir, os.Getenv(secretsOwnerEnv)); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := copyFile(self, filepath.Join(dir, "zketcd-kubeinit")); err != nil {
		return err
	}
	fmt.Printf("credentials in %s; bearer token (also in %s): %s\n", dir, tokenPath, token)
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := to + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, to)
}

// probe GETs url and fails unless the answer is 200.
func probe(url string, timeout time.Duration) error {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // self-signed serving certificate
	}}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, body)
	}
	return nil
}
