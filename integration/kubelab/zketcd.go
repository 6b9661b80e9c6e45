package kubelab

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Zketcd is a `zketcd serve` child process in the secure shape (see
// [Security]).
type Zketcd struct {
	lab *Lab
	sec *Security
	// Name is its member name, Root its ZooKeeper root, ZK the servers.
	Name, Root string
	ZK         []string
	// Addr is the etcd API address, MetricsAddr the /metrics address.
	Addr, MetricsAddr string
	args              []string
	logPath           string
	p                 *proc
}

// StartZketcd starts `zketcd serve` on zk under root with [ZketcdFlags] and
// the lab's [Security], waits until /health is ok, and turns etcd's
// authentication on unless it is on or the lab's ManualAuth is set.
func (l *Lab) StartZketcd(ctx context.Context, name string, zk []string, root string) (*Zketcd, error) {
	sec, err := l.Security()
	if err != nil {
		return nil, err
	}
	dir, err := l.subdir("zketcd-" + name)
	if err != nil {
		return nil, err
	}
	ports, err := l.ports.PickN(2)
	if err != nil {
		return nil, err
	}
	z := &Zketcd{lab: l, sec: sec, Name: name, Root: root, ZK: zk,
		Addr:        fmt.Sprintf("127.0.0.1:%d", ports[0]),
		MetricsAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]),
		logPath:     filepath.Join(dir, "zketcd.log"),
	}
	cert, key := sec.ServingPair(name)
	z.args = ZketcdFlags(ZketcdSite{
		ZK: strings.Join(zk, ","), ZKAuthFile: sec.ZKAuthFile, Name: name,
		ListenClientURLs: z.URL(), AdvertiseClientURLs: z.URL(),
		ListenMetricsURLs: "http://" + z.MetricsAddr,
		CertFile:          cert, KeyFile: key, TrustedCAFile: sec.CAFile,
	}, root)
	l.addLog(z.logPath)
	if err := z.start(ctx); err != nil {
		return nil, err
	}
	l.Defer(func() { z.Stop() })
	if !l.ManualAuth {
		if err := sec.EnableAuth(ctx, z.Addr); err != nil {
			return nil, fmt.Errorf("zketcd %s: %w", name, err)
		}
	}
	return z, nil
}

// URL is the etcd endpoint URL, as given to --etcd-servers.
func (z *Zketcd) URL() string { return "https://" + z.Addr }

// Security is the certificates and identity the instance runs with.
func (z *Zketcd) Security() *Security { return z.sec }

// Args returns the zketcd command line (without the binary).
func (z *Zketcd) Args() []string { return append([]string(nil), z.args...) }

// LogPath is the file with zketcd's output.
func (z *Zketcd) LogPath() string { return z.logPath }

func (z *Zketcd) start(ctx context.Context) error {
	p, err := startProc("zketcd "+z.Name, z.logPath, z.lab.Zketcd, z.args, nil)
	if err != nil {
		return err
	}
	z.p = p
	err = waitFor(ctx, 60*time.Second, 50*time.Millisecond, "zketcd "+z.Name+" healthy", func() (bool, error) {
		if done, werr := p.exited(); done {
			return true, fmt.Errorf("zketcd %w (%v); log tail:\n%s", errNotRunning, werr, p.tail(20))
		}
		return z.Healthy(ctx), nil
	})
	if err != nil {
		p.kill()
	}
	return err
}

// Healthy tells whether /health answers 200.
func (z *Zketcd) Healthy(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+z.MetricsAddr+"/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// Stop sends SIGTERM (SIGKILL after 10s) and waits for the exit.
func (z *Zketcd) Stop() time.Duration {
	if z.p == nil {
		return 0
	}
	return z.p.stop(10 * time.Second)
}

// Restart stops zketcd and starts it again with the same flags (same
// address, name and root). It returns how long the stop took and how long
// zketcd was down in all (from SIGTERM to healthy again).
func (z *Zketcd) Restart(ctx context.Context) (stopped, down time.Duration, err error) {
	start := time.Now()
	stopped = z.Stop()
	for attempt := 0; attempt < 50; attempt++ {
		if err = z.start(ctx); err == nil || !strings.Contains(z.p.tail(5), "address already in use") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return stopped, time.Since(start), err
}

// RestartOnto restarts zketcd as Restart does, with --zk set to zk (the
// operator's change of connect string).
func (z *Zketcd) RestartOnto(ctx context.Context, zk []string) (stopped, down time.Duration, err error) {
	for i, a := range z.args {
		if strings.HasPrefix(a, "--zk=") {
			z.args[i] = "--zk=" + strings.Join(zk, ",")
		}
	}
	z.ZK = append([]string(nil), zk...)
	return z.Restart(ctx)
}

// Grep returns zketcd's log lines matching re (the last max).
func (z *Zketcd) Grep(re *regexp.Regexp, max int) []string { return grepFile(z.logPath, re, max) }

// Client returns a clientv3 client for zketcd as root (the root client
// certificate), closed at the lab's Close.
func (z *Zketcd) Client() (*clientv3.Client, error) {
	cfg, err := z.sec.ClientTLS(z.sec.RootCert, z.sec.RootKey)
	if err != nil {
		return nil, err
	}
	return z.lab.client(z.Addr, cfg)
}

func (l *Lab) client(endpoint string, cfg *tls.Config) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	l.Defer(func() { c.Close() })
	return c, nil
}

// Metrics scrapes /metrics and returns the samples whose name is name and
// whose labels contain every "k=\"v\"" in labels, summed.
func (z *Zketcd) Metric(ctx context.Context, name string, labels ...string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+z.MetricsAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		match := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				match = false
			}
		}
		if !match {
			continue
		}
		f := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}
