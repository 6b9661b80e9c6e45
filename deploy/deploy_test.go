package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/yaml"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

const (
	rulesFile     = "prometheus/zketcd-rules.yml"
	rulesTestFile = "prometheus/zketcd-rules.test.yml"
	dashboardFile = "grafana/zketcd-dashboard.json"
)

// promtool returns the path of Prometheus's promtool (Debian's prometheus
// package). Without it the test is skipped, except in CI (ZKETCD_CI set by
// .ci/run, which installs the package), where that is a failure.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	if os.Getenv("ZKETCD_CI") != "" {
		t.Fatalf("promtool not found in CI (Debian's prometheus package): %v", err)
	}
	t.Skip("promtool not found: install Debian's prometheus package (apt-get install prometheus) to check the alert rules")
	return ""
}

// The rules are valid, and each alert fires (and stays quiet) as its unit
// tests say.
func TestAlertRulesPassPromtool(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", rulesTestFile},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// ruleFile is the part of a Prometheus rule file read here.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Record string `json:"record"`
			Alert  string `json:"alert"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

// queried returns the series the rules and the dashboard query, each with
// where it is queried; recorded series (the rules' own) are not included.
func queried(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(data, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	out := map[string][]string{}
	recorded := map[string]bool{}
	add := func(where, expr string) {
		for _, name := range seriesNames(expr) {
			out[name] = append(out[name], where)
		}
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
			add(filepath.Base(rulesFile)+": "+r.Record+r.Alert, r.Expr)
		}
	}
	data, err = os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	panels := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			add(filepath.Base(dashboardFile)+": "+p.Title, tg.Expr)
			panels++
		}
	}
	labelValues := regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
	for _, v := range dash.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			out[m[1]] = append(out[m[1]], filepath.Base(dashboardFile)+": $"+v.Name)
		}
	}
	if panels < 20 || len(out) < 40 {
		t.Fatalf("read only %d dashboard queries and %d series names: the files' shape changed?", panels, len(out))
	}
	for name := range recorded {
		delete(out, name)
	}
	return out
}

var (
	reString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	reMatchers = regexp.MustCompile(`\{[^}]*\}`)
	reRange    = regexp.MustCompile(`\[[^\]]*\]`)
	reGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	reVariable = regexp.MustCompile(`\$\w+`)
	reIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	keywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
)

// seriesNames returns the metric names a PromQL expression selects: its
// identifiers once strings, label matchers, ranges, grouping labels and
// dashboard variables are removed, less functions (followed by "("),
// keywords and the tails of numbers (1e3).
func seriesNames(expr string) []string {
	s := reString.ReplaceAllString(expr, `""`)
	s = reMatchers.ReplaceAllString(s, "{}")
	s = reRange.ReplaceAllString(s, "[]")
	s = reGrouping.ReplaceAllString(s, " ")
	s = reVariable.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range reIdent.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsAny(s[loc[0]-1:loc[0]], "0123456789.") {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") || keywords[strings.ToLower(name)] {
			continue
		}
		out = append(out, name)
	}
	return out
}

func TestSeriesNamesOfAnExpression(t *testing.T) {
	for expr, want := range map[string]string{
		`etcd_server_has_leader{job=~".*zketcd.*"} == 0`:                                           "etcd_server_has_leader",
		`histogram_quantile(0.99, sum by (instance, le) (rate(a_bucket{x="y{"}[5m]))) > 0.25`:      "a_bucket",
		`max by (job) (p) - on (job) group_right () p{job="j"}`:                                    "p p",
		`predict_linear(x[4h], 4 * 3600) > (q > 0) and r offset 5m > 1e3`:                          "x q r",
		`scalar(max(a{job="$job"})) - b{instance=~"$instance"} unless c[$__rate_interval]`:         "a b c",
		`sum without (grpc_type, grpc_code) (rate(h{code=~"A|B"}[5m])) / ignoring(l) k > bool 0.5`: "h k",
	} {
		if got := strings.Join(seriesNames(expr), " "); got != want {
			t.Errorf("%s: %q, want %q", expr, got, want)
		}
	}
}

// Every series the rules and the dashboard query is exported by a live
// instance: two instances on a real ZooKeeper, the follower forwarding
// writes to the leader, after puts, reads, a watch and a lease, so that the
// series that appear with their first event exist. `up` is Prometheus's own.
func TestEverySeriesTheRulesAndTheDashboardQueryIsExported(t *testing.T) {
	want := queried(t)
	zk := zkservertest.Standalone(t).Addr()
	leader := embedtest.Start(t, []string{zk}, embedtest.Options{ForwardWrites: true})
	testutil.Eventually(t, 20*time.Second, "the first instance leads", func() bool { l, _ := leader.Engine().Leader(); return l })
	follower := embedtest.Start(t, []string{zk}, embedtest.Options{Root: leader.Root(), ForwardWrites: true})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := follower.Client(t)
	wch := c.Watch(ctx, "k", clientv3.WithPrefix())
	for i := range 5 {
		if _, err := c.Put(ctx, fmt.Sprintf("k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	<-wch
	if _, err := c.Get(ctx, "k", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	lease, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KeepAliveOnce(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Client(t).Get(ctx, "k0"); err != nil {
		t.Fatal(err)
	}

	// Gauges the engine sets every 2 s (alarms, sizes) may lag the start.
	var missing []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		have := map[string]bool{"up": true}
		for _, in := range []*embedtest.Instance{leader, follower} {
			for name := range scrape(t, ctx, in.Endpoint()) {
				have[name] = true
			}
		}
		missing = missing[:0]
		for name, where := range want {
			if !have[name] {
				missing = append(missing, fmt.Sprintf("%s (%s)", name, strings.Join(where, "; ")))
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("queried but not exported:\n  %s", strings.Join(missing, "\n  "))
	}
}

// scrape returns the names of the series endpoint's /metrics serves
// (histograms' _bucket, _sum and _count as such).
func scrape(t *testing.T, ctx context.Context, endpoint string) map[string]bool {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+endpoint+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s %s", resp.Status, b)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}
