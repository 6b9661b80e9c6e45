package kubelab

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// APIServer is a kube-apiserver child process on 127.0.0.1 with a bearer
// token in system:masters.
type APIServer struct {
	lab *Lab
	// Name labels the instance in reports.
	Name string
	// Port is the secure port; Token the bearer token.
	Port  int
	Token string
	// Args is the full command line (without the binary).
	Args    []string
	dir     string
	logPath string
	p       *proc
	client  *http.Client
}

// APIServerOptions selects the store and the scenario flags.
type APIServerOptions struct {
	// Name labels the instance (directory and reports).
	Name string
	// EtcdServers is --etcd-servers.
	EtcdServers string
	// Extra flags after [APIServerFlags].
	Extra []string
	// EtcdCertFile and EtcdKeyFile, if set, are the client certificate
	// kube-apiserver presents to an https store instead of the lab's
	// kube-apiserver certificate (a fleet tenant's, whose common name
	// names the tenant).
	EtcdCertFile, EtcdKeyFile string
}

// StartAPIServer writes a token file and a service account key pair and
// starts kube-apiserver with [APIServerFlags] and opts.Extra. It does not
// wait for readiness (see WaitReady).
func (l *Lab) StartAPIServer(opts APIServerOptions) (*APIServer, error) {
	if l.KubeAPIServer == "" {
		return nil, fmt.Errorf("no kube-apiserver binary")
	}
	dir, err := l.subdir("kube-apiserver-" + opts.Name)
	if err != nil {
		return nil, err
	}
	port, err := l.ports.Pick()
	if err != nil {
		return nil, err
	}
	a := &APIServer{lab: l, Name: opts.Name, Port: port, dir: dir, logPath: filepath.Join(dir, "kube-apiserver.log")}
	if err := a.writeCredentials(); err != nil {
		return nil, err
	}
	site := APIServerSite{
		BindAddress: "127.0.0.1", AdvertiseAddress: "127.0.0.1", SecurePort: strconv.Itoa(port),
		CertDir: filepath.Join(dir, "certs"), EtcdServers: opts.EtcdServers,
		SAPublicKey: filepath.Join(dir, "sa.pub"), SAPrivateKey: filepath.Join(dir, "sa.key"),
		TokenFile: filepath.Join(dir, "tokens.csv"),
	}
	if strings.Contains(opts.EtcdServers, "https://") {
		// zketcd's secure shape: its CA and kube-apiserver's certificate.
		sec, err := l.Security()
		if err != nil {
			return nil, err
		}
		site.EtcdCAFile, site.EtcdCertFile, site.EtcdKeyFile = sec.CAFile, sec.APIServerCert, sec.APIServerKey
		if opts.EtcdCertFile != "" {
			site.EtcdCertFile, site.EtcdKeyFile = opts.EtcdCertFile, opts.EtcdKeyFile
		}
	}
	a.Args = append(APIServerFlags(site), opts.Extra...)
	a.client = &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, // the apiserver's self-signed certificate
		MaxIdleConnsPerHost: 16,
	}}
	l.addLog(a.logPath)
	if err := a.Start(); err != nil {
		return nil, err
	}
	l.Defer(func() { a.Stop() })
	return a, nil
}

func (a *APIServer) writeCredentials() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	a.Token = hex.EncodeToString(tok)
	files := map[string][]byte{
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"tokens.csv": []byte(a.Token + ",admin,admin-uid,system:masters\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(a.dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Start starts the process (again, after Stop) with the same flags, port
// and credentials.
func (a *APIServer) Start() error {
	p, err := startProc("kube-apiserver "+a.Name, a.logPath, a.lab.KubeAPIServer, a.Args, nil)
	if err != nil {
		return err
	}
	a.p = p
	return nil
}

// Stop sends SIGTERM (SIGKILL after 20s) and waits for the exit.
func (a *APIServer) Stop() time.Duration {
	if a.p == nil {
		return 0
	}
	return a.p.stop(20 * time.Second)
}

// Kill SIGKILLs the process.
func (a *APIServer) Kill() {
	if a.p != nil {
		a.p.kill()
	}
}

// Exited tells whether the process has exited, its exit code and when.
func (a *APIServer) Exited() (done bool, code int, after time.Duration) {
	done, _ = a.p.exited()
	if !done {
		return false, -1, time.Since(a.p.started)
	}
	a.p.mu.Lock()
	defer a.p.mu.Unlock()
	return true, a.p.cmd.ProcessState.ExitCode(), a.p.exitAt.Sub(a.p.started)
}

// Grep returns the log lines matching re (the last max).
func (a *APIServer) Grep(re *regexp.Regexp, max int) []string { return grepFile(a.logPath, re, max) }

// LogTail returns the last n lines of the log.
func (a *APIServer) LogTail(n int) string { return a.p.tail(n) }

// LogPath is the file with kube-apiserver's output.
func (a *APIServer) LogPath() string { return a.logPath }

// WaitReady polls /readyz every 100ms until it answers 200 and returns the
// time since the process started. It fails if the process exits.
func (a *APIServer) WaitReady(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	var last string
	err := waitFor(ctx, timeout, 100*time.Millisecond, "kube-apiserver "+a.Name+" /readyz", func() (bool, error) {
		if done, code, after := a.Exited(); done {
			return true, fmt.Errorf("kube-apiserver exited with status %d after %v; log tail:\n%s", code, after.Round(time.Millisecond), a.LogTail(30))
		}
		st, body, err := a.Do(ctx, http.MethodGet, "/readyz", nil, "")
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("HTTP %d: %s", st, bytes.TrimSpace(body))
		return st == http.StatusOK, nil
	})
	if err != nil {
		if done, _, _ := a.Exited(); done {
			return 0, err
		}
		_, verbose, _ := a.Do(ctx, http.MethodGet, "/readyz?verbose", nil, "")
		return 0, fmt.Errorf("%w (last: %s)\n/readyz?verbose:\n%s\nlog tail:\n%s", err, last, verbose, a.LogTail(30))
	}
	return time.Since(a.p.started), nil
}

// Do sends a request with the bearer token and returns the status and body.
func (a *APIServer) Do(ctx context.Context, method, path string, body []byte, contentType string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := a.newRequest(ctx, method, path, body, contentType)
	if err != nil {
		return 0, nil, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (a *APIServer) newRequest(ctx context.Context, method, path string, body []byte, contentType string) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("https://127.0.0.1:%d%s", a.Port, path), r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "zketcd-kubelab/1")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req, nil
}

// Call sends a JSON request (in, if not nil, marshaled; a []byte is sent
// as is) and decodes a 2xx answer into out (if not nil). Other statuses
// return an *APIError.
func (a *APIServer) Call(ctx context.Context, method, path, contentType string, in, out any) error {
	var body []byte
	switch v := in.(type) {
	case nil:
	case []byte:
		body = v
	case string:
		body = []byte(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		body = b
	}
	if body != nil && contentType == "" {
		contentType = "application/json"
	}
	st, b, err := a.Do(ctx, method, path, body, contentType)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if st < 200 || st > 299 {
		e := &APIError{Method: method, Path: path, Code: st, Body: string(b)}
		_ = json.Unmarshal(b, &e.Status)
		return e
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode: %w: %s", method, path, err, b)
		}
	}
	return nil
}

// APIError is a non-2xx answer.
type APIError struct {
	Method, Path string
	Code         int
	Body         string
	Status       Status
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.Path, e.Code, strings.TrimSpace(e.Body))
}

// HTTPCode returns the HTTP status of an *APIError, 0 for other errors.
func HTTPCode(err error) int {
	if e, ok := err.(*APIError); ok {
		return e.Code
	}
	return 0
}

// Check is one line of /readyz?verbose or /livez?verbose.
type Check struct {
	Name string
	OK   bool
}

// Health reads path?verbose (path "/readyz" or "/livez") and returns the
// HTTP status and the checks.
func (a *APIServer) Health(ctx context.Context, path string) (int, []Check, error) {
	st, body, err := a.Do(ctx, http.MethodGet, path+"?verbose", nil, "")
	if err != nil {
		return 0, nil, err
	}
	var checks []Check
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "[+]"):
			checks = append(checks, Check{Name: strings.TrimSuffix(line[3:], " ok"), OK: true})
		case strings.HasPrefix(line, "[-]"):
			name, _, _ := strings.Cut(line[3:], " ")
			checks = append(checks, Check{Name: name})
		}
	}
	return st, checks, nil
}
