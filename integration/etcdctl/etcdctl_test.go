// Package etcdctl runs the real etcdctl v3.7.3 binary against a real
// `zketcd dev` process and, as the oracle, a real etcd 3.7.3 process, with
// the same command script, and compares the outputs after normalising only
// what legitimately differs between the two servers.
//
// It builds nothing: $ETCDCTL, $ETCD_BINARY and $ZKETCD_BINARY name the
// binaries (`make etcdctl-test` builds etcdctl and etcd with
// integration/bench/build-peers.sh and zketcd with `make build`). Without
// them the test is skipped. $ETCDCTL_TEST_TRANSCRIPT=FILE writes every
// command and its normalised output to FILE.
package etcdctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// target is one server under test, as etcdctl sees it.
type target struct {
	name     string
	etcdctl  string
	endpoint string // 127.0.0.1:port
	lease    string // hex ID of the lease the script granted
	rev      string // a revision the script captured ({rev} in arguments)
}

// result is what one etcdctl invocation printed.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

// ctlEnv is the environment for etcdctl: the test's, without ETCDCTL_*
// settings that would change its behaviour.
func ctlEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCDCTL_") {
			env = append(env, kv)
		}
	}
	return env
}

// ctl runs etcdctl against tg with args ({lease} replaced by the lease the
// script granted) and stdin.
func (tg *target) ctl(ctx context.Context, stdin string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	full := []string{"--endpoints=" + tg.endpoint, "--command-timeout=10s"}
	for _, a := range args {
		full = append(full, strings.NewReplacer("{lease}", tg.lease, "{rev}", tg.rev).Replace(a))
	}
	cmd := exec.CommandContext(ctx, tg.etcdctl, full...)
	cmd.Env = ctlEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		return r, fmt.Errorf("etcdctl %s: %w", strings.Join(full, " "), err)
	}
	return r, nil
}

// requireEnv returns the executable named by $name, or skips the test.
func requireEnv(t *testing.T, name, hint string) string {
	t.Helper()
	path := os.Getenv(name)
	if path == "" {
		t.Skipf("%s is not set: this test runs real binaries (%s); run `make etcdctl-test`", name, hint)
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s=%s is not an executable file (%v)", name, path, err)
	}
	return path
}

// startZketcd starts `zketcd dev` on a fresh local ZooKeeper, with extra
// flags.
func startZketcd(t *testing.T, bin string, extra ...string) *server {
	dir := t.TempDir()
	port := freePorts(t, 1)[0]
	endpoint := fmt.Sprintf("127.0.0.1:%d", port)
	return startServer(t, "zketcd", endpoint, filepath.Join(dir, "zketcd.log"), bin, append([]string{"dev",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "http://" + endpoint,
		"--advertise-client-urls", "http://" + endpoint}, extra...)...)
}

// startEtcd starts a one-member etcd 3.7.3, with extra flags.
func startEtcd(t *testing.T, bin string, extra ...string) *server {
	dir := t.TempDir()
	ports := freePorts(t, 2)
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	return startServer(t, "etcd", strings.TrimPrefix(client, "http://"), filepath.Join(dir, "etcd.log"), bin, append([]string{
		"--name", "oracle", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "oracle=" + peer, "--unsafe-no-fsync", "--log-level", "warn"}, extra...)...)
}

// waitHealthy waits until `etcdctl endpoint health` succeeds on s.
func waitHealthy(ctx context.Context, t *testing.T, s *server, tg *target) {
	t.Helper()
	start := time.Now()
	err := waitFor(ctx, 90*time.Second, s.name+" healthy", func() (bool, error) {
		if s.exited() {
			return false, fmt.Errorf("%s exited; log tail:\n%s", s.name, s.logTail(20))
		}
		r, err := tg.ctl(ctx, "", "endpoint", "health", "--command-timeout=1s")
		return err == nil && r.code == 0, nil
	})
	if err != nil {
		t.Fatalf("%v; log tail:\n%s", err, s.logTail(20))
	}
	t.Logf("%s healthy on %s after %s", s.name, s.endpoint, time.Since(start).Round(time.Millisecond))
}

// transcript, when $ETCDCTL_TEST_TRANSCRIPT names a file, gets every
// command with zketcd's normalised output (and etcd's where it differs).
var transcript io.Writer

func record(title string, got [2]result) {
	if transcript == nil {
		return
	}
	fmt.Fprintf(transcript, "$ %s\n%s", title, got[0])
	if got[0] != got[1] {
		fmt.Fprintf(transcript, "=== etcd differs:\n%s", got[1])
	}
}

// step is one etcdctl command of the script, run against both servers.
type step struct {
	args  []string
	stdin string
	// norm normalises one server's output beyond the common normalisation
	// (each with its reason at the step).
	norm func(tg *target, r result) result
	// after runs on each server's raw result (e.g. to capture a lease ID).
	after func(t *testing.T, tg *target, r result)
	// check validates both normalised results beyond their equality.
	check func(t *testing.T, z, e result)
}

func cmd(args ...string) step { return step{args: args} }

var (
	reClusterID = regexp.MustCompile(`"cluster_id":\d+`)
	reMemberID  = regexp.MustCompile(`"member_id":\d+`)
	// zketcd's raft_term is the ZooKeeper epoch of the newest commit: 0 on
	// a fresh ZooKeeper, so JSON leaves it out where etcd prints its term.
	reRaftTerm      = regexp.MustCompile(`,"raft_term":\d+`)
	reFieldsIDs     = regexp.MustCompile(`(?m)^"(ClusterID|MemberID|RaftTerm)" : \d+$`)
	reClientLogLine = regexp.MustCompile(`(?m)^\{"level":.*\}$`)
	reRemaining     = regexp.MustCompile(`remaining\((\d+)s\)`)
	reAttached      = regexp.MustCompile(`attached keys\(\[([^\]]*)\]\)`)
	reTook          = regexp.MustCompile(`took = [0-9.]+[µnm]?s`)
	reLeaseGrant    = regexp.MustCompile(`^lease ([0-9a-f]{16}) granted with TTL\((\d+)s\)`)
)

// normalise replaces what legitimately differs between any two servers:
// cluster and member IDs (derived from names and start time), raft terms
// (ZooKeeper's epoch on zketcd), the endpoint's port, the lease ID the
// server chose, and the client's retry log lines (timestamps, local ports;
// their method and error are kept).
func normalise(tg *target, r result) result {
	f := func(s string) string {
		s = reClusterID.ReplaceAllString(s, `"cluster_id":CLUSTER`)
		s = reMemberID.ReplaceAllString(s, `"member_id":MEMBER`)
		s = reRaftTerm.ReplaceAllString(s, "")
		s = reFieldsIDs.ReplaceAllString(s, `"$1" : ID`)
		s = reClientLogLine.ReplaceAllStringFunc(s, func(line string) string {
			var l struct{ Msg, Method, Error string }
			if json.Unmarshal([]byte(line), &l) != nil {
				return line
			}
			return fmt.Sprintf("client log: %s: %s: %s", l.Msg, l.Method, l.Error)
		})
		s = strings.ReplaceAll(s, tg.endpoint, "ENDPOINT")
		if tg.lease != "" {
			id, _ := strconv.ParseUint(tg.lease, 16, 64)
			s = strings.ReplaceAll(s, tg.lease, "LEASE")
			s = strings.ReplaceAll(s, strconv.FormatUint(id, 10), "LEASE")
		}
		return s
	}
	r.stdout, r.stderr = f(r.stdout), f(r.stderr)
	return r
}

// runBoth runs one step on both servers and compares the normalised outputs.
func runBoth(ctx context.Context, t *testing.T, z, e *target, s step) {
	t.Helper()
	var got [2]result
	for i, tg := range []*target{z, e} {
		r, err := tg.ctl(ctx, s.stdin, s.args...)
		if err != nil {
			t.Fatal(err)
		}
		if s.after != nil {
			s.after(t, tg, r)
		}
		r = normalise(tg, r)
		if s.norm != nil {
			r = s.norm(tg, r)
		}
		got[i] = r
	}
	record("etcdctl "+strings.Join(s.args, " "), got)
	if got[0] != got[1] {
		t.Errorf("etcdctl %s: outputs differ\n=== zketcd:\n%s=== etcd:\n%s", strings.Join(s.args, " "), got[0], got[1])
	}
	if s.check != nil {
		s.check(t, got[0], got[1])
	}
}

func TestEtcdctl(t *testing.T) {
	ctl := requireEnv(t, "ETCDCTL", "etcdctl v3.7.3: integration/bench/build-peers.sh etcdctl")
	zketcdBin := requireEnv(t, "ZKETCD_BINARY", "zketcd: make build")
	etcdBin := requireEnv(t, "ETCD_BINARY", "etcd 3.7.3, the oracle: integration/bench/build-peers.sh etcd")
	ctx := t.Context()
	if v, err := exec.CommandContext(ctx, ctl, "version").Output(); err != nil || !strings.Contains(string(v), "etcdctl version: 3.7.3") {
		t.Fatalf("%s version: %v: %s (want etcdctl 3.7.3)", ctl, err, v)
	}

	start := time.Now()
	zs, es := startZketcd(t, zketcdBin), startEtcd(t, etcdBin)
	z := &target{name: "zketcd", etcdctl: ctl, endpoint: zs.endpoint}
	e := &target{name: "etcd", etcdctl: ctl, endpoint: es.endpoint}
	waitHealthy(ctx, t, zs, z)
	waitHealthy(ctx, t, es, e)
	t.Logf("both servers ready in %s", time.Since(start).Round(time.Millisecond))

	if path := os.Getenv("ETCDCTL_TEST_TRANSCRIPT"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		transcript = f
		t.Cleanup(func() { transcript = nil })
	}

	run := func(t *testing.T, s step) { t.Helper(); runBoth(ctx, t, z, e, s) }
	phase := func(name string, steps ...step) {
		t.Run(name, func(t *testing.T) {
			for _, s := range steps {
				run(t, s)
			}
		})
	}
	succeeded := func(t *testing.T, z, e result) {
		if e.code != 0 {
			t.Errorf("etcd failed: %s", e)
		}
	}
	failed := func(want string) func(t *testing.T, z, e result) {
		return func(t *testing.T, z, e result) {
			if e.code == 0 || !strings.Contains(e.stderr, want) {
				t.Errorf("etcd: want a failure with %q: %s", want, e)
			}
		}
	}

	// A fresh store first: etcdctl 3.7.3's status table divided by zketcd's
	// DbSize of 0 (fixed in grpcsrv: statusDBSize).
	phase("fresh", endpointStatusTable, cmd("get", "", "--from-key", "-w", "json"))

	// Revisions are identical on both servers: each starts at revision 1
	// and runs the same writes.
	phase("put",
		step{args: []string{"put", "foo", "bar"}, check: succeeded},                                          // rev 2
		cmd("put", "foo", "baz", "--prev-kv"),                                                                // rev 3
		cmd("put", "a/1", "one"), cmd("put", "a/2", "two"), cmd("put", "a/3", "three"), cmd("put", "b", "x"), // revs 4-7
		cmd("put", "foo", "--ignore-value"), // rev 8
		step{args: []string{"put", "nokey", "--ignore-value"}, check: failed("etcdserver: key not found")},
	)
	phase("get",
		cmd("get", "foo"),
		cmd("get", "a", "--prefix"),
		cmd("get", "a", "--prefix", "--keys-only"),
		cmd("get", "foo", "--rev=2"),
		cmd("get", "a", "--prefix", "--limit=2"),
		cmd("get", "a", "--prefix", "--sort-by=VALUE", "--order=DESCEND"),
		cmd("get", "a", "--prefix", "--sort-by=CREATE", "--order=DESCEND", "-w", "json"),
		cmd("get", "a", "--prefix", "--limit=1", "-w", "json"),
		cmd("get", "a", "--prefix", "--count-only", "-w", "fields"),
		cmd("get", "a/", "--from-key", "--keys-only"),
		cmd("get", "foo", "--print-value-only"),
		cmd("get", "foo", "--consistency=s"),
		cmd("get", "foo", "-w", "fields"),
		cmd("get", "nosuch", "-w", "json"),
		step{args: []string{"get", "foo", "--rev=1000"}, check: failed("etcdserver: mvcc: required revision is a future revision")},
	)
	phase("del",
		cmd("del", "b"),                            // rev 9
		cmd("del", "a/3", "--prev-kv"),             // rev 10
		cmd("del", "nosuch"),                       //
		cmd("del", "a", "--prefix"),                // rev 11
		cmd("get", "", "--from-key", "-w", "json"), //
	)
	phase("txn",
		step{args: []string{"txn"}, stdin: "value(\"foo\") = \"baz\"\n\nput foo yes\nget foo\n\nput foo no\n\n"},                        // rev 12
		step{args: []string{"txn"}, stdin: "value(\"foo\") = \"zzz\"\n\nput foo yes\n\nput foo no\nget foo\n\n"},                        // rev 13
		step{args: []string{"txn", "-w", "json"}, stdin: "mod(\"foo\") > \"0\"\nversion(\"foo\") = \"5\"\n\nget foo\ndel nosuch\n\n\n"}, //
		step{args: []string{"txn", "-w", "json"}, stdin: "create(\"nosuch\") > \"0\"\n\n\nput t1 v\nget t --prefix\n\n"},                // rev 14
	)
	phase("compaction",
		cmd("put", "c", "1"), // rev 15
		cmd("put", "c", "2"), // rev 16
		step{args: []string{"compaction", "15"}, check: succeeded},
		step{args: []string{"get", "foo", "--rev=14"}, check: failed("etcdserver: mvcc: required revision has been compacted")},
		cmd("get", "c", "--rev=15"),
		step{args: []string{"compaction", "5"}, check: failed("etcdserver: mvcc: required revision has been compacted")},
		step{args: []string{"compaction", "1000"}, check: failed("etcdserver: mvcc: required revision is a future revision")},
		cmd("compaction", "16", "--physical"),
	)
	// The lease ID is chosen by each server; normalise replaces it.
	captureLease := func(t *testing.T, tg *target, r result) {
		m := reLeaseGrant.FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("%s: lease grant printed %q", tg.name, r.stdout)
		}
		tg.lease = m[1]
	}
	// The remaining TTL is estimated from each server's clock; both must
	// be within the granted 100 s and at least 90 s. etcd lists a lease's
	// keys from a Go map, in random order: they are sorted.
	remaining := func(tg *target, r result) result {
		r.stdout = reAttached.ReplaceAllStringFunc(r.stdout, func(s string) string {
			keys := strings.Fields(reAttached.FindStringSubmatch(s)[1])
			slices.Sort(keys)
			return "attached keys([" + strings.Join(keys, " ") + "])"
		})
		r.stdout = reRemaining.ReplaceAllStringFunc(r.stdout, func(s string) string {
			n, _ := strconv.Atoi(reRemaining.FindStringSubmatch(s)[1])
			if n >= 90 && n <= 100 {
				return "remaining(90..100s)"
			}
			return s
		})
		return r
	}
	phase("lease",
		step{args: []string{"lease", "grant", "100"}, after: captureLease},
		cmd("put", "l/1", "v1", "--lease={lease}"), // rev 17
		cmd("put", "l/2", "v2", "--lease={lease}"), // rev 18
		cmd("get", "l/1", "-w", "json"),
		step{args: []string{"lease", "timetolive", "{lease}", "--keys"}, norm: remaining},
		step{args: []string{"lease", "timetolive", "{lease}", "-w", "json"}, norm: func(tg *target, r result) result {
			r.stdout = regexp.MustCompile(`"ttl":(9\d|100),`).ReplaceAllString(r.stdout, `"ttl":90..100,`)
			return r
		}},
		cmd("lease", "list"),
		cmd("lease", "keep-alive", "--once", "{lease}"),
		cmd("lease", "revoke", "{lease}"), // rev 19
		cmd("get", "l/", "--prefix", "-w", "json"),
		cmd("lease", "timetolive", "{lease}"),
		step{args: []string{"lease", "revoke", "{lease}"}, check: failed("etcdserver: requested lease not found")},
		cmd("lease", "keep-alive", "--once", "{lease}"),
		cmd("lease", "list"),
	)
	t.Run("watch", func(t *testing.T) { testWatch(ctx, t, z, e, run) })
	phase("errors",
		step{args: []string{"put", "", "x"}, check: failed("etcdserver: key is not provided")},
		step{args: []string{"get", ""}, check: failed("etcdserver: key is not provided")},
		step{args: []string{"put", "big"}, stdin: strings.Repeat("v", 1600*1024), check: failed("etcdserver: request is too large")},
		step{args: []string{"txn"}, stdin: "\n" + strings.Repeat("put k v\n", 129) + "\n\n", check: failed("etcdserver: too many operations in txn request")},
	)
	t.Run("endpoint", func(t *testing.T) { testEndpoint(ctx, t, z, e, run) })
	t.Run("member", func(t *testing.T) { testMember(ctx, t, z, e, run) })
	t.Run("auth", func(t *testing.T) { testAuth(t, run) }) // last: it leaves users in the store
	t.Logf("all steps in %s", time.Since(start).Round(time.Millisecond))
}
