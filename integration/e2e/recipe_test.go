package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/integration/kubelab"
)

// docBlocks returns the fenced blocks of a doc that follow a marker
// <!-- PREFIX: NAME -->, by name.
func docBlocks(t *testing.T, doc, prefix string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, doc))
	if err != nil {
		t.Fatal(err)
	}
	marker := regexp.MustCompile(`^<!-- ` + regexp.QuoteMeta(prefix) + `: ([\w-]+) -->$`)
	blocks := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	var name string
	var block []string
	in := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case marker.MatchString(strings.TrimSpace(line)):
			name = marker.FindStringSubmatch(strings.TrimSpace(line))[1]
		case name != "" && !in && strings.HasPrefix(line, "```"):
			in, block = true, nil
		case in && line == "```":
			blocks[name], name, in = strings.Join(block, "\n")+"\n", "", false
		case in:
			block = append(block, line)
		}
	}
	return blocks
}

// runDoc runs a documented shell block in dir with env added, and returns
// its output.
func runDoc(t *testing.T, ctx context.Context, dir, name, script string, env ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", script)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docs/kubernetes.md %q: %v\n%s\n%s", name, err, script, out)
	}
	return string(out)
}

// toolOrSkip returns the binary named by $env (make e2e builds etcdctl and
// etcdutl into the cache and passes them).
func toolOrSkip(t *testing.T, env string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		t.Skipf("%s is not set; run `make e2e`", env)
	}
	return p
}

// TestKubeAPIServerOnTheSecureRecipe runs docs/kubernetes.md "In
// production" as written: the certificates, the ZooKeeper identity and the
// etcdctl commands of its marked blocks; two zketcd instances with the
// documented flags on one root; kube-apiserver with both in
// --etcd-servers, over TLS with its client certificate, one instance
// stopped under it; docs/zketcd-backup three times; the restore drill.
func TestKubeAPIServerOnTheSecureRecipe(t *testing.T) {
	bin := kubeAPIServerOrSkip(t)
	etcdctl, etcdutl := toolOrSkip(t, "ETCDCTL"), toolOrSkip(t, "ETCDUTL")
	ctx := t.Context()
	blocks := docBlocks(t, "docs/kubernetes.md", "kube-test")
	for _, want := range []string{"pki", "zk-identity", "auth", "restore"} {
		if blocks[want] == "" {
			t.Fatalf("docs/kubernetes.md has no %q block for this test", want)
		}
	}
	lab := newLab(t, bin)
	dir := filepath.Join(lab.Dir, "recipe")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// etcdctl, etcdutl and zketcd by those names on the PATH, as documented.
	tools := filepath.Join(lab.Dir, "tools")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]string{"etcdctl": etcdctl, "etcdutl": etcdutl, "zketcd": lab.Zketcd} {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(tools, name)); err != nil {
			t.Fatal(err)
		}
	}
	path := "PATH=" + tools + ":" + os.Getenv("PATH")

	// Certificates and the identity, as documented; both instances on this
	// host's loopback.
	runDoc(t, ctx, dir, "pki", blocks["pki"], "INSTANCES=zketcd-1=127.0.0.1 zketcd-2=127.0.0.1")
	runDoc(t, ctx, dir, "zk-identity", blocks["zk-identity"])
	at := func(f string) string { return filepath.Join(dir, f) }
	sec := &kubelab.Security{
		CAFile: at("ca.crt"),
		InstanceCerts: map[string][2]string{
			"zketcd-1": {at("zketcd-1.crt"), at("zketcd-1.key")},
			"zketcd-2": {at("zketcd-2.crt"), at("zketcd-2.key")},
		},
		APIServerCert: at("kube-apiserver.crt"), APIServerKey: at("kube-apiserver.key"),
		RootCert: at("root.crt"), RootKey: at("root.key"),
		ZKAuthFile: at("zk-auth"),
	}
	lab.SetSecurity(sec)
	lab.ManualAuth = true // the documented etcdctl commands turn it on

	zk, err := lab.ZooKeeper(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const root = "/kubernetes"
	z1, err := lab.StartZketcd(ctx, "zketcd-1", []string{zk.Addr()}, root)
	if err != nil {
		t.Fatal(err)
	}
	z2, err := lab.StartZketcd(ctx, "zketcd-2", []string{zk.Addr()}, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("zketcd %s", strings.Join(z1.Args(), " "))
	etcdctlEnv := []string{path, "ETCDCTL_ENDPOINTS=" + z1.URL(), "ETCDCTL_CACERT=ca.crt", "ETCDCTL_CERT=root.crt", "ETCDCTL_KEY=root.key"}
	out := runDoc(t, ctx, dir, "auth", blocks["auth"], etcdctlEnv...)
	t.Logf("the documented etcdctl commands:\n%s", out)

	// Only certificates of the CA that name a user are served.
	intruder := issueClientCert(t, ctx, dir, "intruder")
	for _, c := range []struct {
		name      string
		cert, key string
		refused   bool
		because   string // in the error, if refused
	}{
		{"no certificate (the TLS handshake fails)", "", "", true, ""},
		{"a certificate of the CA naming no user", intruder, strings.TrimSuffix(intruder, ".crt") + ".key", true, "permission denied"},
		{"root's certificate", sec.RootCert, sec.RootKey, false, ""},
		{"kube-apiserver's certificate", sec.APIServerCert, sec.APIServerKey, false, ""},
	} {
		cfg, err := sec.ClientTLS(c.cert, c.key)
		if err != nil {
			t.Fatal(err)
		}
		err = putWith(ctx, z2.Addr, cfg)
		switch {
		case !c.refused && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.refused && (err == nil || !strings.Contains(err.Error(), c.because)):
			t.Errorf("%s: %v, want a refusal with %q", c.name, errOrOK(err), c.because)
		default:
			t.Logf("%s: %v", c.name, errOrOK(err))
		}
	}

	// kube-apiserver on both instances, over TLS with its certificate.
	api, err := lab.StartAPIServer(kubelab.APIServerOptions{Name: "recipe", EtcdServers: z1.URL() + "," + z2.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver %s", strings.Join(api.Args, " "))
	if d, err := api.WaitReady(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("kube-apiserver on zketcd over TLS: /readyz 200 after %s", d.Round(time.Millisecond))
	}
	if _, err := api.Create(ctx, "/api/v1/namespaces", kubelab.Namespace("recipe")); err != nil {
		t.Fatal(err)
	}
	cmPath := "/api/v1/namespaces/recipe/configmaps"
	if _, err := api.Create(ctx, cmPath, kubelab.ConfigMap("before", map[string]string{"a": "1"})); err != nil {
		t.Fatal(err)
	}
	// One instance stopped under it: kube-apiserver carries on with the other.
	stopped := time.Now()
	z1.Stop()
	var after *kubelab.Object
	deadline := time.Now().Add(time.Minute)
	for {
		after, err = api.Create(ctx, cmPath, kubelab.ConfigMap("after", map[string]string{"b": "2"}))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("a create with zketcd-1 stopped: %v", err)
	}
	if _, err := api.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	l, err := api.List(ctx, cmPath)
	if err != nil || len(l.Items) != 2 {
		t.Fatalf("LIST with zketcd-1 stopped: %v %+v", err, l)
	}
	t.Logf("zketcd-1 stopped: a create went through zketcd-2 %s later (resourceVersion %s); LIST at %s holds both configmaps",
		time.Since(stopped).Round(time.Millisecond), after.Metadata.ResourceVersion, l.Metadata.ResourceVersion)

	// Backups: the script as installed, three runs keeping two.
	backups := filepath.Join(dir, "backups")
	script, err := filepath.Abs(filepath.Join(repoRoot, "docs/zketcd-backup"))
	if err != nil {
		t.Fatal(err)
	}
	backupEnv := []string{path, "ZKETCD_BACKUP_ENDPOINT=" + z2.URL(), "ZKETCD_BACKUP_DIR=" + backups, "ZKETCD_BACKUP_KEEP=2",
		"ETCDCTL_CACERT=" + sec.CAFile, "ETCDCTL_CERT=" + sec.RootCert, "ETCDCTL_KEY=" + sec.RootKey}
	for i := range 3 {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond) // file names are per second
		}
		out := runDoc(t, ctx, dir, "zketcd-backup", script, backupEnv...)
		if i == 0 {
			t.Logf("zketcd-backup:\n%s", out)
		}
	}
	files, err := filepath.Glob(filepath.Join(backups, "zketcd-*.db"))
	if err != nil || len(files) != 2 {
		t.Fatalf("backups after three runs keeping 2: %v %v", files, err)
	}
	sort.Strings(files)
	if leftovers, _ := filepath.Glob(filepath.Join(backups, "*.part")); len(leftovers) > 0 {
		t.Fatalf("partial files left: %v", leftovers)
	}

	// The restore drill, as documented, on the newest file.
	out = runDoc(t, ctx, dir, "restore", blocks["restore"], path, "SNAPSHOT="+files[1], "ZK="+zk.Addr())
	t.Logf("the restore drill:\n%s", out)
	row := regexp.MustCompile(`(?m)^/registry/namespaces/default\s+\d+\s+\d+\s+\d+\s`)
	if !row.MatchString(out) {
		t.Fatalf("the restored root does not list /registry/namespaces/default:\n%s", out)
	}
	out = runDoc(t, ctx, dir, "rv", fmt.Sprintf("zketcd rv --zk %s --zk-root /kubernetes-restore-drill --zk-auth-file zk-auth /registry/configmaps/recipe/after", zk.Addr()), path)
	if !strings.Contains(out, "/registry/configmaps/recipe/after ") || strings.Contains(out, "after  -") {
		t.Fatalf("the backup lacks the configmap written with zketcd-1 stopped:\n%s", out)
	}
}

// issueClientCert makes a client certificate of dir's CA for common name
// cn with openssl, as the documented commands do, and returns its file.
func issueClientCert(t *testing.T, ctx context.Context, dir, cn string) string {
	t.Helper()
	script := fmt.Sprintf(`openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=%[1]s" -keyout %[1]s.key -out %[1]s.csr
printf 'extendedKeyUsage=clientAuth\n' > %[1]s.ext
openssl x509 -req -in %[1]s.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile %[1]s.ext -out %[1]s.crt
`, cn)
	runDoc(t, ctx, dir, "a client certificate", script)
	return filepath.Join(dir, cn+".crt")
}

// putWith writes one key at endpoint with TLS cfg.
func putWith(ctx context.Context, endpoint string, cfg *tls.Config) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: cfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = c.Put(pctx, "recipe-check", "x")
	return err
}

func errOrOK(err error) string {
	if err == nil {
		return "served"
	}
	return "refused: " + err.Error()
}
