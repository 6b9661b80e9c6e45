package faults

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// row is one scenario's line in the summary.
type row struct {
	Scenario, Fault       string
	Faults                int
	Duration              time.Duration
	Ops, Failed           int
	Resolved, Dropped     int
	WatchEvents           int
	Compactions, Leases   int
	Violations            int
	Linearizable          string
	PorcupineOps          int
	ErrorWindow, Recovery time.Duration
	ProbeAfterHeal        time.Duration
	Details, Problems     []string
	Extra                 string
	// ProbeDuring: every probe lease expired during its fault.
	ProbeDuring bool
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func (r row) cells() []string {
	return []string{
		r.Scenario,
		fmt.Sprintf("%d", r.Faults),
		secs(r.Duration),
		fmt.Sprintf("%d", r.Ops),
		fmt.Sprintf("%d", r.Failed),
		fmt.Sprintf("%d / %d", r.Resolved, r.Dropped),
		fmt.Sprintf("%s (%d ops)", r.Linearizable, r.PorcupineOps),
		fmt.Sprintf("%d", r.WatchEvents),
		fmt.Sprintf("%d", r.Compactions),
		fmt.Sprintf("%d", r.Leases),
		fmt.Sprintf("%d", r.Violations),
		secs(r.ErrorWindow),
		secs(r.Recovery),
		r.probe(),
	}
}

func (r row) probe() string {
	if r.ProbeDuring {
		return "during the fault"
	}
	return secs(r.ProbeAfterHeal)
}

var header = []string{"scenario", "faults", "ran", "ops", "failed", "unknown: applied / not",
	"linearizable", "watch events", "compactions", "leases", "violations",
	"clients saw errors", "errors after heal", "probe lease expired after heal"}

// textTable renders rows for the terminal.
func textTable(rows []row) string {
	all := [][]string{header}
	for _, r := range rows {
		all = append(all, r.cells())
	}
	widths := make([]int, len(header))
	for _, cells := range all {
		for i, c := range cells {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for _, cells := range all {
		for i, c := range cells {
			fmt.Fprintf(&b, "%-*s  ", widths[i], c)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// markdownTable renders rows as a markdown table.
func markdownTable(rows []row) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(header)) + "\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r.cells(), " | ") + " |\n")
	}
	return b.String()
}

// machine describes this machine in one line.
func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if i := strings.Index(l, ":"); i >= 0 {
					cpu = strings.TrimSpace(l[i+1:])
				}
				break
			}
		}
	}
	kernel := "linux"
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		kernel = strings.TrimSpace(string(out))
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %d GiB", (kb+(1<<19))>>20)
		}
	}
	zk := "ZooKeeper"
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "zookeeper").Output(); err == nil && len(out) > 0 {
		zk = "ZooKeeper " + strings.TrimSpace(string(out)) + " (Debian)"
	}
	return fmt.Sprintf("%s, %d CPUs%s, %s, %s, %s", cpu, runtime.NumCPU(), mem, kernel, runtime.Version(), zk)
}

// keptMarker starts the part of the report file that make faults keeps as
// it is (sections written by hand or by other targets, such as make soak's
// figures).
const keptMarker = "<!-- Below: not written by make faults, kept as is. -->"

// keptSections returns the part of the file at path from keptMarker on
// ("" if none), to be appended to a new report.
func keptSections(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if i := strings.Index(string(b), keptMarker); i >= 0 {
		return "\n" + string(b[i:])
	}
	return ""
}

func markdown(rows []row, duration string) string {
	var b strings.Builder
	b.WriteString("# Reliability under faults\n\n")
	b.WriteString("Written by `make faults` (`integration/faults`) down to the marker line; it keeps everything from the marker on as it is: do not edit the part above it by hand.\n\n")
	fmt.Fprintf(&b, "Run on %s on %s; workload time per scenario %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), machine(), duration)
	b.WriteString(markdownTable(rows))
	b.WriteString("\n## Faults, one by one\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "\n**%s** (%s)\n\n", r.Scenario, r.Extra)
		for _, d := range r.Details {
			fmt.Fprintf(&b, "- %s\n", d)
		}
		if len(r.Problems) > 0 {
			fmt.Fprintf(&b, "\nViolations (%d; the first %d):\n\n```\n", len(r.Problems), min(len(r.Problems), 5))
			for _, p := range r.Problems[:min(len(r.Problems), 5)] {
				b.WriteString(p + "\n")
			}
			b.WriteString("```\n")
		}
	}
	b.WriteString("\n## What is checked\n")
	b.WriteString(`
Each scenario starts a 3-member ZooKeeper ensemble (tickTime 500 ms, forceSync=no) and two
` + "`zketcd serve`" + ` processes on one root (session timeout 4 s): A reaches ZooKeeper through one
fault-injecting TCP proxy per member, B directly (in ZKFollowerPartition B through proxies
of its own too, and every member-to-member link of the ensemble through one as well).
The ReadLease* scenarios run both instances with ` + "`--read-lease`" + ` (the leader answers
linearizable reads and the follower's read index from memory) under the same faults.
ReadLeaseGrantedTimeout asks for a 10 s session of an ensemble whose maxSessionTimeout is
1 s and cuts the zketcd leader's ZooKeeper follower off from the quorum, with only probes for
workload: every 10 ms a linearizable read through each instance and a put through each (none
from before the cut until the other instance leads, then through it alone), and a 2 s lease
kept alive through each instance every 50 ms. ForwardLongPartition blackholes the leader's
internal endpoint for 13 s (longer than the leader keeps the answers it gave, shorter than the
16 s re-sends last at its 8 s session timeout) with clients that set no deadline, 50 open-loop
puts a second, and a tag index of 8 tags a generation (` + "`ZKETCD_FAULT_TAG_GENERATION`" + `).
Clients: one on A, one on B, one on both.
Before the workload, 20,000 ballast keys outside its key space (64-byte values, through B),
then 256 values of 8 KiB written and deleted: each compaction then changes a small share of
the keys and the log holds more superseded data than half the live data, so physical
compaction writes a whole base generation, then deltas (chains of up to 8), and every
restart, reload and recovery in a scenario loads them. LogGenerationLeaderKill and
LogGenerationZKLeaderKill leave the superseded values out: the log then stays mostly live,
every physical compaction keeps it as the generation (no base written), and every restart
replays it from its first entry. The checkers start from the revision the ballast ended at.
The workload: 4 kube-apiserver-like workers (CAS updates on the mod revision they last saw,
creates, CAS deletes, gets, paginated LISTs whose later pages are read at the first page's
revision), 2 etcd-like workers (puts, multi-key transactions, a conditional transaction
with a delete, range reads), a lease worker (2-3 s leases with a key each: some kept alive
for a while, some given one keepalive around the time they are due, some revoked, the rest
left to expire), a compactor (physical Compact every second, to the revision it read two
rounds earlier, never past what B's whole-key-space watch has seen), and watches on every client (the whole key space from
revision 2 with prev_kv; kube-apiserver's watch with progress notifications and
WithRequireLeader; one key). Before each fault a probe lease (TTL 3 s, a key, no
keepalives) is granted.

Columns: **faults** injected (one every hold + settle time); **ops** requests made, **failed**
those that got an error; **unknown** failed writes that the watches show applied / not
applied (each put writes a value never written before); **linearizable**: porcupine's verdict
on every successful read and write plus the applied unknown writes, against a whole-store
etcd model with revisions; **violations**: problems found by all checkers (must be 0):
linearizability, the six watch guarantees and event contents (` + "`integration/watchcheck`" + `), no
acknowledged write lost, none applied twice, no read or write answered at a revision below
a write acknowledged before it was sent, revisions never going backwards for a
worker, list pages matching the store at their revision, compaction errors only below a
requested compaction, leases never expiring before TTL after their last acknowledged
renewal, and every lease not revoked expiring at most 24 s after it was due (TTL after its
last renewal, or after the heal of a fault that overlapped it); **clients saw errors**: the
longest span, over the scenario's faults, from the first failed request to the last;
**errors after heal**: the longest time from a heal to the last failed request (a failed
request counts for the last fault injected before it returned);
**probe lease expired after heal**: the latest, over the faults, that a probe lease's key
was seen deleted after the heal of the last fault injected before it went (a later fault
restarts the lease's clock; "during the fault" when every probe lease expired before that
fault was healed, e.g. by the other instance).
`)
	return b.String()
}
