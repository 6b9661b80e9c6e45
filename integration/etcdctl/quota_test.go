package etcdctl

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// quotaBytes is the --quota-backend-bytes both servers run with here: etcd
// checks it against its bbolt file (pages, not bytes: a 10 KiB value takes
// three 4 KiB pages), zketcd against the bytes its root holds before
// compression, so the number of puts that fit differs somewhat; the script
// compares what etcdctl prints from the first refused write on.
const quotaBytes = 512 << 10

var (
	// etcdctl prints alarms in protobuf's text form, whose spacing Go's
	// protobuf library varies between binaries on purpose.
	reAlarmMember = regexp.MustCompile(`memberID:\d+\s+alarm:`)
	reRevision    = regexp.MustCompile(`"revision":\d+`)
	reCompacted   = regexp.MustCompile(`compacted revision \d+`)
	reDefragTook  = regexp.MustCompile(`\. took \S+`)
)

// quotaNorm replaces the member ID in alarms (each server's own), the
// revisions (each server took as many puts as fit in its quota) and
// timings.
func quotaNorm(tg *target, r result) result {
	f := func(s string) string {
		s = reAlarmMember.ReplaceAllString(s, "memberID:MEMBER alarm:")
		s = reRevision.ReplaceAllString(s, `"revision":REV`)
		s = reCompacted.ReplaceAllString(s, "compacted revision REV")
		s = reDefragTook.ReplaceAllString(s, ". took T")
		return reTook.ReplaceAllString(s, "took = T")
	}
	r.stdout, r.stderr = f(r.stdout), f(r.stderr)
	return r
}

// TestEtcdctlQuota runs the space quota's life cycle on a zketcd and an
// etcd 3.7.3 started with a small --quota-backend-bytes: fill until the
// NOSPACE alarm, what is refused and what is not, alarm list, endpoint
// status and health under the alarm, delete, compaction, defrag (which
// must bring the size back under the quota), alarm disarm, writes again.
func TestEtcdctlQuota(t *testing.T) {
	ctl := requireEnv(t, "ETCDCTL", "etcdctl v3.7.3: integration/bench/build-peers.sh etcdctl")
	zketcdBin := requireEnv(t, "ZKETCD_BINARY", "zketcd: make build")
	etcdBin := requireEnv(t, "ETCD_BINARY", "etcd 3.7.3, the oracle: integration/bench/build-peers.sh etcd")
	ctx := t.Context()
	quota := fmt.Sprintf("--quota-backend-bytes=%d", quotaBytes)
	zs, es := startZketcd(t, zketcdBin, quota), startEtcd(t, etcdBin, quota)
	z := &target{name: "zketcd", etcdctl: ctl, endpoint: zs.endpoint}
	e := &target{name: "etcd", etcdctl: ctl, endpoint: es.endpoint}
	waitHealthy(ctx, t, zs, z)
	waitHealthy(ctx, t, es, e)
	if path := os.Getenv("ETCDCTL_TEST_TRANSCRIPT"); path != "" {
		// After TestEtcdctl's script, in the same file.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "### quota (--quota-backend-bytes=%d)\n", quotaBytes)
		transcript = f
		t.Cleanup(func() { transcript = nil; f.Close() })
	}
	run := func(s step) {
		t.Helper()
		if s.norm == nil {
			s.norm = quotaNorm
		} else {
			n := s.norm
			s.norm = func(tg *target, r result) result { return n(tg, quotaNorm(tg, r)) }
		}
		runBoth(ctx, t, z, e, s)
	}
	failed := func(want string) func(t *testing.T, z, e result) {
		return func(t *testing.T, z, e result) {
			if e.code == 0 || !strings.Contains(e.stderr, want) {
				t.Errorf("etcd: want a failure with %q: %s", want, e)
			}
		}
	}
	const noSpace = "etcdserver: mvcc: database space exceeded"

	run(step{args: []string{"lease", "grant", "100"}, after: func(t *testing.T, tg *target, r result) {
		if m := reLeaseGrant.FindStringSubmatch(r.stdout); m != nil {
			tg.lease = m[1]
		}
	}})
	// Fill: one key, ever more history, until the quota refuses a put. One
	// repeated character: zketcd stores it compressed to almost nothing,
	// yet its quota counts the 10 KiB, as etcd's does.
	value := strings.Repeat("q", 10<<10)

	fit := map[*target]int{}
	for _, tg := range []*target{z, e} {
		n := 0
		for ; n < 400; n++ {
			r, err := tg.ctl(ctx, value, "put", "q")
			if err != nil {
				t.Fatal(err)
			}
			if r.code != 0 {
				if !strings.Contains(r.stderr, noSpace) {
					t.Fatalf("%s: put %d failed otherwise: %s", tg.name, n, r)
				}
				break
			}
		}
		if n == 0 || n == 400 {
			t.Fatalf("%s: %d puts of 10 KiB fit in a quota of %d bytes", tg.name, n, quotaBytes)
		}
		t.Logf("%s: %d puts of 10 KiB fit in %d bytes", tg.name, n, quotaBytes)
		fit[tg] = n
	}
	if fit[z] > 2*fit[e] || 2*fit[z] < fit[e] {
		t.Errorf("%d puts fit in zketcd's quota, %d in etcd's: the quota no longer bounds what is stored as etcd's does", fit[z], fit[e])
	}

	run(cmd("alarm", "list"))
	run(step{args: []string{"put", "x", "1"}, check: failed(noSpace)})
	run(step{args: []string{"txn"}, stdin: "\n\nput x 1\n\n", check: failed(noSpace)})
	run(step{args: []string{"lease", "grant", "100"}, check: failed(noSpace)})
	// Reads, deletes, lease revocations and a txn without puts pass.
	run(cmd("get", "q", "--keys-only"))
	run(step{args: []string{"txn"}, stdin: "\n\nget q --keys-only\ndel nosuch\n\n"})
	run(cmd("lease", "revoke", "{lease}"))
	statusJSON := func(tg *target) epStatus {
		t.Helper()
		r, err := tg.ctl(ctx, "", "endpoint", "status", "-w", "json")
		var list []epStatus
		if err == nil && r.code == 0 {
			err = json.Unmarshal([]byte(r.stdout), &list)
		}
		if err != nil || len(list) != 1 {
			t.Fatalf("%s: endpoint status -w json: %v %s", tg.name, err, r)
		}
		return list[0]
	}
	for _, tg := range []*target{z, e} {
		s := statusJSON(tg).Status
		want := fmt.Sprintf("memberID:%d alarm:NOSPACE", s.Header.MemberID)
		if len(s.Errors) != 1 || strings.TrimSpace(s.Errors[0]) != want || s.DBSizeQuota != quotaBytes {
			t.Errorf("%s: endpoint status under NOSPACE: errors %q (want %q), quota %d", tg.name, s.Errors, want, s.DBSizeQuota)
		}
		if s.DBSize < quotaBytes-(10<<10)-512 {
			t.Errorf("%s: DB size %d under NOSPACE, quota %d", tg.name, s.DBSize, quotaBytes)
		}
	}
	run(step{args: []string{"endpoint", "status"}, norm: endpointStatusTable.norm})
	run(cmd("endpoint", "health"))

	// Free the space: delete, compact, defragment.
	run(cmd("del", "q"))
	run(step{args: []string{"get", "q", "-w", "json"}, after: func(t *testing.T, tg *target, r result) {
		m := reRevision.FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("%s: no revision in %s", tg.name, r)
		}
		tg.rev = strings.TrimPrefix(m[0], `"revision":`)
	}, norm: func(tg *target, r result) result {
		r.stdout = reRaftTerm.ReplaceAllString(r.stdout, "")
		return r
	}})
	run(cmd("compaction", "{rev}"))
	run(step{args: []string{"defrag"}, check: func(t *testing.T, z, e result) {
		if e.code != 0 {
			t.Errorf("etcd: defrag: %s", e)
		}
	}})
	deadline := time.Now().Add(10 * time.Second)
	for _, tg := range []*target{z, e} {
		for {
			s := statusJSON(tg).Status
			if s.DBSize < quotaBytes/4 && s.DBSizeInUse <= s.DBSize {
				t.Logf("%s: after defrag DB size %d, in use %d", tg.name, s.DBSize, s.DBSizeInUse)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after defrag DB size %d, in use %d: want well under the quota %d", tg.name, s.DBSize, s.DBSizeInUse, quotaBytes)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Still refused until disarmed, as in etcd.
	run(step{args: []string{"put", "x", "1"}, check: failed(noSpace)})
	run(cmd("alarm", "disarm"))
	run(cmd("alarm", "list"))
	run(step{args: []string{"put", "x", "1"}, check: func(t *testing.T, z, e result) {
		if z.code != 0 || e.code != 0 {
			t.Errorf("put after disarm: zketcd %s, etcd %s", z, e)
		}
	}})
	run(cmd("alarm", "disarm"))
	run(cmd("endpoint", "health"))
}
