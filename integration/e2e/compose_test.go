package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"sigs.k8s.io/yaml"

	"github.com/zketcd/zketcd/integration/kubelab"
)

// These tests parse the compose file — strictly, and with the loader
// Compose v2 uses — and check it against the flags the e2e test proves
// (kubelab's flag lists), the kube-apiserver version integration/kube
// builds, and the Dockerfiles it builds zketcd and ZooKeeper from. `make
// compose-test` runs it for real (integration/compose).

type composeFile struct {
	Name     string                    `json:"name"`
	Services map[string]composeService `json:"services"`
	Networks map[string]struct {
		IPAM struct {
			Config []struct {
				Subnet string `json:"subnet"`
			} `json:"config"`
		} `json:"ipam"`
	} `json:"networks"`
	Volumes map[string]any `json:"volumes"`
}

type composeService struct {
	Image string `json:"image"`
	Build *struct {
		Context    string            `json:"context"`
		Dockerfile string            `json:"dockerfile"`
		Args       map[string]string `json:"args"`
	} `json:"build"`
	Hostname    string            `json:"hostname"`
	Restart     string            `json:"restart"`
	User        string            `json:"user"`
	Entrypoint  []string          `json:"entrypoint"`
	Command     []string          `json:"command"`
	Environment map[string]string `json:"environment"`
	Ports       []string          `json:"ports"`
	Volumes     []string          `json:"volumes"`
	Networks    map[string]struct {
		IPv4Address string `json:"ipv4_address"`
	} `json:"networks"`
	DependsOn map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
	Healthcheck *struct {
		Test        []string `json:"test"`
		Interval    string   `json:"interval"`
		Timeout     string   `json:"timeout"`
		Retries     int      `json:"retries"`
		StartPeriod string   `json:"start_period"`
	} `json:"healthcheck"`
}

const repoRoot = "../.."

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	// Strict: an unknown or duplicated key (a typo such as "healtcheck")
	// fails the test instead of being ignored.
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

func TestComposeServices(t *testing.T) {
	c := loadCompose(t)
	var names []string
	for n := range c.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"kube-apiserver", "kube-auth", "kube-init", "zk1", "zk2", "zk3", "zketcd"}
	if !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}
	for name, s := range c.Services {
		if name == "kube-init" || name == "kube-auth" { // one-shot
			continue
		}
		if s.Healthcheck == nil || len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" {
			t.Errorf("%s: no exec-form healthcheck (%+v)", name, s.Healthcheck)
		}
		if s.Restart == "" {
			t.Errorf("%s: no restart policy", name)
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s: port %q is not published on 127.0.0.1 only", name, p)
			}
		}
	}
}

// zkServers returns the ensemble's client addresses from the ZooKeeper
// services, checking their image, ids and server lists.
func zkServers(t *testing.T, c composeFile) []string {
	t.Helper()
	var addrs, lines []string
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("zk%d", i)
		s := c.Services[name]
		if s.Image != "zketcd-zookeeper:3.8" || s.Build == nil || s.Build.Context != "docker/zookeeper" ||
			s.Build.Args["BASE_IMAGE"] != "${ZOOKEEPER_BASE_IMAGE:-debian:bookworm-slim}" {
			t.Errorf("%s: image %q build %+v, want zketcd-zookeeper:3.8 built from docker/zookeeper (Debian's package)", name, s.Image, s.Build)
		}
		if s.Environment["ZOO_MY_ID"] != fmt.Sprint(i) {
			t.Errorf("%s: ZOO_MY_ID %q", name, s.Environment["ZOO_MY_ID"])
		}
		if s.Hostname != name {
			t.Errorf("%s: hostname %q", name, s.Hostname)
		}
		if !slices.Equal(s.Healthcheck.Test, []string{"CMD", "/usr/local/bin/zk-healthy"}) {
			t.Errorf("%s: healthcheck %v, want docker/zookeeper's zk-healthy", name, s.Healthcheck.Test)
		}
		if !strings.Contains(s.Environment["ZOO_4LW_COMMANDS_WHITELIST"], "conf") {
			t.Errorf("%s: 4lw.commands.whitelist %q lacks conf (docs/operations.md, ZooKeeper settings)", name, s.Environment["ZOO_4LW_COMMANDS_WHITELIST"])
		}
		lines = append(lines, s.Environment["ZOO_SERVERS"])
	}
	re := regexp.MustCompile(`^server\.(\d)=(zk\d):2888:3888;(\d+)$`)
	for i, l := range lines {
		if l != lines[0] {
			t.Errorf("zk%d: ZOO_SERVERS differs from zk1's: %q", i+1, l)
		}
	}
	for i, f := range strings.Fields(lines[0]) {
		m := re.FindStringSubmatch(f)
		if m == nil || m[1] != fmt.Sprint(i+1) || m[2] != fmt.Sprintf("zk%d", i+1) {
			t.Fatalf("ZOO_SERVERS entry %q: want server.%d=zk%d:2888:3888;PORT", f, i+1, i+1)
		}
		addrs = append(addrs, m[2]+":"+m[3])
	}
	if len(addrs) != 3 {
		t.Fatalf("ZOO_SERVERS %q: want 3 servers", lines[0])
	}
	return addrs
}

func TestComposeZketcdFlags(t *testing.T) {
	c := loadCompose(t)
	zk := zkServers(t, c)
	s := c.Services["zketcd"]
	f, _ := kubelab.ParseFlags(s.Command)
	site := kubelab.ZketcdSite{ZK: f["zk"], ZKAuthFile: f["zk-auth-file"], Name: f["name"], ListenClientURLs: f["listen-client-urls"],
		AdvertiseClientURLs: f["advertise-client-urls"], ListenMetricsURLs: f["listen-metrics-urls"],
		CertFile: f["cert-file"], KeyFile: f["key-file"], TrustedCAFile: f["trusted-ca-file"]}
	if want := kubelab.ZketcdFlags(site, kubelab.ZketcdRoot); !slices.Equal(s.Command, want) {
		t.Errorf("zketcd command\n got %q\nwant %q (kubelab.ZketcdFlags, as make e2e runs it)", s.Command, want)
	}
	if site.ZK != strings.Join(zk, ",") {
		t.Errorf("--zk=%s, want the ensemble %s", site.ZK, strings.Join(zk, ","))
	}
	if s.Build == nil || s.Build.Context != "." || s.Build.Dockerfile != "Dockerfile" ||
		s.Build.Args["GO_IMAGE"] == "" || s.Build.Args["BASE_IMAGE"] == "" {
		t.Errorf("zketcd: build %+v, want the top-level Dockerfile with GO_IMAGE and BASE_IMAGE", s.Build)
	}
	// The loss files: a volume at the default --rollback-loss-dir.
	if vol := mountSource(t, s.Volumes, "/var/lib/zketcd/loss"); vol == "" || c.Volumes[vol] == nil && vol != "" && !strings.HasPrefix(vol, "zketcd-loss") {
		t.Errorf("zketcd: no volume at /var/lib/zketcd/loss (its loss files) in %v", s.Volumes)
	}
	clientPort := urlPort(t, site.ListenClientURLs)
	metricsPort := urlPort(t, site.ListenMetricsURLs)
	if site.AdvertiseClientURLs != "https://"+s.Hostname+":"+clientPort {
		t.Errorf("--advertise-client-urls=%s, want https://%s:%s", site.AdvertiseClientURLs, s.Hostname, clientPort)
	}
	if !slices.Contains(s.Ports, "127.0.0.1:"+clientPort+":"+clientPort) {
		t.Errorf("zketcd: client port %s not published (ports %v)", clientPort, s.Ports)
	}
	if want := []string{"CMD", "/usr/local/bin/zketcd-kubeinit", "probe", "http://127.0.0.1:" + metricsPort + "/health"}; !slices.Equal(s.Healthcheck.Test, want) {
		t.Errorf("zketcd healthcheck %q, want %q", s.Healthcheck.Test, want)
	}
	for i := 1; i <= 3; i++ {
		if s.DependsOn[fmt.Sprintf("zk%d", i)].Condition != "service_healthy" {
			t.Errorf("zketcd must wait for zk%d to be healthy: %+v", i, s.DependsOn)
		}
	}
}

func TestComposeKubeAPIServerFlags(t *testing.T) {
	c := loadCompose(t)
	s := c.Services["kube-apiserver"]
	version := kubeVersion(t)
	if want := "${KUBE_APISERVER_IMAGE:-registry.k8s.io/kube-apiserver:" + version + "}"; s.Image != want {
		t.Errorf("kube-apiserver image %q, want %q (the version integration/kube builds for make e2e)", s.Image, want)
	}
	if !slices.Equal(s.Entrypoint, []string{"/usr/local/bin/kube-apiserver"}) {
		t.Errorf("kube-apiserver entrypoint %q", s.Entrypoint)
	}
	f, pos := kubelab.ParseFlags(s.Command)
	if len(pos) != 0 {
		t.Errorf("kube-apiserver command has non-flag arguments %q", pos)
	}
	site := kubelab.APIServerSite{
		BindAddress: f["bind-address"], AdvertiseAddress: f["advertise-address"], SecurePort: f["secure-port"],
		CertDir: f["cert-dir"], EtcdServers: f["etcd-servers"], SAPublicKey: f["service-account-key-file"],
		SAPrivateKey: f["service-account-signing-key-file"], TokenFile: f["token-auth-file"],
		EtcdCAFile: f["etcd-cafile"], EtcdCertFile: f["etcd-certfile"], EtcdKeyFile: f["etcd-keyfile"],
	}
	if site.EtcdCAFile == "" {
		t.Error("kube-apiserver reaches zketcd without TLS (no --etcd-cafile)")
	}
	want := kubelab.APIServerFlags(site)
	if got, w := sorted(s.Command), sorted(want); !slices.Equal(got, w) {
		t.Errorf("kube-apiserver flags differ from kubelab.APIServerFlags (what make e2e runs):\n got %q\nwant %q", got, w)
	}

	// Where the site-specific values point.
	z := c.Services["zketcd"]
	zf, _ := kubelab.ParseFlags(z.Command)
	if want := "https://" + z.Hostname + ":" + urlPort(t, zf["listen-client-urls"]); site.EtcdServers != want {
		t.Errorf("--etcd-servers=%s, want zketcd at %s", site.EtcdServers, want)
	}
	ip := s.Networks["default"].IPv4Address
	_, subnet, err := net.ParseCIDR(c.Networks["default"].IPAM.Config[0].Subnet)
	if err != nil || site.AdvertiseAddress != ip || !subnet.Contains(net.ParseIP(ip)) {
		t.Errorf("--advertise-address=%s, static address %s, subnet %v (%v)", site.AdvertiseAddress, ip, subnet, err)
	}
	if !slices.Contains(s.Ports, "127.0.0.1:"+site.SecurePort+":"+site.SecurePort) {
		t.Errorf("secure port %s not published on 127.0.0.1 (ports %v)", site.SecurePort, s.Ports)
	}
	if s.DependsOn["zketcd"].Condition != "service_healthy" || s.DependsOn["kube-auth"].Condition != "service_completed_successfully" {
		t.Errorf("kube-apiserver depends_on %+v: want zketcd healthy and kube-auth completed", s.DependsOn)
	}
	auth := c.Services["kube-auth"]
	if auth.Image != z.Image || !slices.Equal(auth.Entrypoint, []string{"/usr/local/bin/zketcd-kubeinit"}) || len(auth.Command) != 3 ||
		auth.Command[0] != "auth" || auth.Command[1] != site.EtcdServers || auth.DependsOn["zketcd"].Condition != "service_healthy" {
		t.Errorf("kube-auth: image %q entrypoint %q command %q depends_on %+v; want zketcd-kubeinit auth %s DIR once zketcd is healthy",
			auth.Image, auth.Entrypoint, auth.Command, auth.DependsOn, site.EtcdServers)
	}

	// The credentials: kube-init writes them into the directory
	// kube-apiserver mounts, under the names its flags use.
	init := c.Services["kube-init"]
	if init.Image != z.Image || !slices.Equal(init.Entrypoint, []string{"/usr/local/bin/zketcd-kubeinit"}) ||
		len(init.Command) != 2 || init.Command[0] != "creds" {
		t.Fatalf("kube-init: image %q entrypoint %q command %q; want the zketcd image running zketcd-kubeinit creds DIR", init.Image, init.Entrypoint, init.Command)
	}
	dir := init.Command[1]
	hostDir := mountSource(t, init.Volumes, dir)
	if got := mountSource(t, s.Volumes, dir); got != hostDir || hostDir == "" {
		t.Errorf("kube-apiserver mounts %q at %s, kube-init writes %q", got, dir, hostDir)
	}
	if len(auth.Command) == 3 && (auth.Command[2] != dir || mountSource(t, auth.Volumes, dir) != hostDir) {
		t.Errorf("kube-auth reads root's certificate from %s mounted from %q; kube-init writes %q", auth.Command[2], mountSource(t, auth.Volumes, dir), hostDir)
	}
	for flag, file := range map[string]string{"token-auth-file": "tokens.csv", "service-account-key-file": "sa.pub", "service-account-signing-key-file": "sa.key",
		"etcd-cafile": "ca.crt", "etcd-certfile": kubelab.APIServerUser + ".crt", "etcd-keyfile": kubelab.APIServerUser + ".key"} {
		if f[flag] != dir+"/"+file {
			t.Errorf("--%s=%s, want %s/%s (written by zketcd-kubeinit creds)", flag, f[flag], dir, file)
		}
	}
	if want := []string{"CMD", dir + "/zketcd-kubeinit", "probe", "https://127.0.0.1:" + site.SecurePort + "/readyz"}; !slices.Equal(s.Healthcheck.Test, want) {
		t.Errorf("kube-apiserver healthcheck %q, want %q", s.Healthcheck.Test, want)
	}
	if mountSource(t, s.Volumes, site.CertDir) == "" {
		t.Errorf("--cert-dir=%s is not a volume", site.CertDir)
	}
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]string{}
	var froms []string
	for _, l := range strings.Split(string(b), "\n") {
		if a, ok := strings.CutPrefix(l, "ARG "); ok && len(froms) == 0 {
			name, def, _ := strings.Cut(a, "=")
			args[name] = def
		}
		if strings.HasPrefix(l, "FROM ") {
			froms = append(froms, strings.Fields(l)[1])
		}
	}
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	switch {
	case len(froms) != 2 || froms[0] != "${GO_IMAGE}" || froms[1] != "${BASE_IMAGE}":
		t.Errorf("Dockerfile stages %q: want a builder FROM ${GO_IMAGE} and a runtime stage FROM ${BASE_IMAGE}", froms)
	case goVersion == nil || args["GO_IMAGE"] != "golang:"+string(goVersion[1]):
		t.Errorf("Dockerfile GO_IMAGE default %q, want golang:%s (go.mod)", args["GO_IMAGE"], goVersion[1])
	case !strings.Contains(args["BASE_IMAGE"], "distroless/static"):
		t.Errorf("Dockerfile BASE_IMAGE default %q: want distroless static", args["BASE_IMAGE"])
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/zketcd ", "./cmd/zketcd-kubeinit", `ENTRYPOINT ["/usr/local/bin/zketcd"]`,
		"buildinfo.version=${VERSION}", "buildinfo.commit=${COMMIT}", "/var/lib/zketcd/loss"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Dockerfile does not contain %q", want)
		}
	}
}

// TestComposeFileLoadsInComposeV2 loads docker-compose.yml with the loader
// of Compose v2 (compose-go: schema validation, interpolation, paths), as
// `docker compose config` does: Compose v1 (Debian's docker-compose 1.29)
// is checked by make compose-test, which runs the file.
func TestComposeFileLoadsInComposeV2(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithName("zketcd-kube"), cli.WithWorkingDirectory(root), cli.WithEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("Compose v2's loader refuses docker-compose.yml: %v", err)
	}
	if len(p.Services) != 7 {
		t.Errorf("Compose v2 sees %d services", len(p.Services))
	}
	if img := p.Services["kube-apiserver"].Image; img != "registry.k8s.io/kube-apiserver:"+kubeVersion(t) {
		t.Errorf("kube-apiserver image interpolated to %q", img)
	}
	if dep := p.Services["kube-apiserver"].DependsOn["kube-auth"]; dep.Condition != "service_completed_successfully" {
		t.Errorf("kube-apiserver's dependency on kube-auth: %+v", dep)
	}
}

// kubeVersion is the k8s.io/kubernetes version integration/kube builds.
func kubeVersion(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(repoRoot, "integration/kube/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes (v1\.\d+\.\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("integration/kube/go.mod: no k8s.io/kubernetes requirement")
	}
	return string(m[1])
}

func urlPort(t *testing.T, u string) string {
	t.Helper()
	i := strings.LastIndex(u, ":")
	if i < 0 {
		t.Fatalf("URL %q has no port", u)
	}
	return strings.TrimSuffix(u[i+1:], "/")
}

// mountSource returns the source mounted at target ("" if none).
func mountSource(t *testing.T, volumes []string, target string) string {
	t.Helper()
	for _, v := range volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			return parts[0]
		}
	}
	return ""
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestComposeClosesZooKeepersData: the compose file runs zketcd with a
// ZooKeeper identity (so its znodes are not world-readable), its simple
// tokens keyed by a secret outside ZooKeeper and its serving certificate,
// all read from files that kube-init writes into a volume only kube-init
// and zketcd mount.
func TestComposeClosesZooKeepersData(t *testing.T) {
	c := loadCompose(t)
	z, init := c.Services["zketcd"], c.Services["kube-init"]
	zf, _ := kubelab.ParseFlags(z.Command)
	idFile := zf["zk-auth-file"]
	if idFile == "" {
		t.Fatalf("zketcd has no ZooKeeper identity (--zk-auth-file): %q", z.Command)
	}
	if filepath.Dir(zf["key-file"]) != filepath.Dir(idFile) {
		t.Errorf("zketcd's serving key %s is not with its other secrets in %s", zf["key-file"], filepath.Dir(idFile))
	}
	tokens := z.Environment["ZKETCD_AUTH_TOKEN"]
	keyFile, ok := strings.CutPrefix(tokens, "simple,secret-file=")
	if !ok {
		t.Fatalf("ZKETCD_AUTH_TOKEN %q: want simple tokens with a secret-file", tokens)
	}
	dir := init.Environment["ZKETCD_SECRETS_DIR"]
	if dir == "" || filepath.Dir(idFile) != dir || filepath.Dir(keyFile) != dir {
		t.Fatalf("kube-init writes zketcd's secrets to %q; zketcd reads %s and %s", dir, idFile, keyFile)
	}
	vol := mountSource(t, init.Volumes, dir)
	if vol == "" || mountSource(t, z.Volumes, dir) != vol || strings.ContainsAny(vol, "./") {
		t.Fatalf("the secrets volume %q must be a named volume mounted by kube-init and zketcd at %s", vol, dir)
	}
	if _, ok := c.Volumes[vol]; !ok {
		t.Fatalf("volume %s is not declared", vol)
	}
	if mountSource(t, c.Services["kube-apiserver"].Volumes, dir) != "" {
		t.Fatal("kube-apiserver mounts zketcd's secrets")
	}
	if z.DependsOn["kube-init"].Condition != "service_completed_successfully" {
		t.Fatalf("zketcd must start after kube-init wrote its secrets: %+v", z.DependsOn)
	}
	for _, arg := range z.Command {
		if strings.HasPrefix(arg, "--zk-auth=") {
			t.Fatalf("the ZooKeeper credential is on zketcd's command line: %s", arg)
		}
	}
}
