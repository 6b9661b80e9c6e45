package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Java Flight Recorder profiles of the ZooKeeper JVMs (-zk-jfr DIR): every
// member runs a continuous recording with the "profile" settings (Java
// samples every 10 ms); after each cell the harness dumps the recording of
// every member to DIR/<server>-<workload>-<clients>-m<member>.jfr with the
// measured window's bounds in a .window file beside it, and `zkbench
// jfr-top` summarizes the samples inside the window. The recording costs
// ZooKeeper a little CPU and the dump (jcmd) some more after the window:
// use it for where the time goes, not for CPU totals.

// jfrRecording is the name of the harness's recording in each JVM.
const jfrRecording = "zkbench"

// jfrFlag is the JVM flag that starts the recording.
func jfrFlag() string {
	return "-XX:StartFlightRecording=name=" + jfrRecording + ",settings=profile,maxage=30m"
}

// jfrWindow dumps every ZooKeeper member's recording of [start, end] when
// the stack records (its ZooKeeper was started with a JFR directory).
// Failures are noted in res.
func jfrWindow(ctx context.Context, t *Target, res *Result, start, end time.Time) {
	if t.zk == nil || t.zk.jfrDir == "" {
		return
	}
	for i, m := range t.zk.servers() {
		pid := m.PID()
		if pid == 0 {
			continue
		}
		base := filepath.Join(t.zk.jfrDir, fmt.Sprintf("%s-%s-%d-m%d", t.Name, res.Workload, res.Clients, i+1))
		// The dump holds whole chunks around the window; the window file
		// tells jfr-top which samples are inside it.
		window := start.Format(time.RFC3339Nano) + "\n" + end.Format(time.RFC3339Nano) + "\n"
		if err := os.WriteFile(base+".window", []byte(window), 0o644); err != nil {
			res.Note = joinNote(res.Note, "jfr: "+err.Error())
			return
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		out, err := exec.CommandContext(cctx, "jcmd", fmt.Sprint(pid), "JFR.dump", "name="+jfrRecording,
			"begin="+start.UTC().Format("2006-01-02T15:04:05Z"), "end="+end.Add(time.Second).UTC().Format("2006-01-02T15:04:05Z"),
			"filename="+base+".jfr").CombinedOutput()
		cancel()
		if err != nil {
			res.Note = joinNote(res.Note, fmt.Sprintf("jfr dump of member %d: %v: %s", i+1, err, oneLine(string(out))))
		}
	}
}

// JFRSample is one execution sample: its thread and its stack, innermost
// frame first (methods without line numbers).
type JFRSample struct {
	At     time.Time
	Thread string
	Stack  []string
}

// ParseJFRPrint reads the text of `jfr print --events jdk.ExecutionSample`
// and returns its samples. Times are the printed local times of day on
// day (the recording's date; samples before the first one's time of day
// are taken to be on the next day).
func ParseJFRPrint(r io.Reader, day time.Time) ([]JFRSample, error) {
	var out []JFRSample
	var cur *JFRSample
	inStack := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "jdk.ExecutionSample {":
			out = append(out, JFRSample{})
			cur = &out[len(out)-1]
		case cur == nil:
		case strings.HasPrefix(line, "startTime = "):
			v := strings.TrimPrefix(line, "startTime = ")
			if tm, err := time.ParseInLocation("15:04:05.000", strings.Fields(v)[0], time.Local); err == nil {
				y, mo, d := day.In(time.Local).Date()
				cur.At = time.Date(y, mo, d, tm.Hour(), tm.Minute(), tm.Second(), tm.Nanosecond(), time.Local)
			}
		case strings.HasPrefix(line, "sampledThread = "):
			v := strings.TrimPrefix(line, "sampledThread = ")
			if i := strings.Index(v, `" (`); i > 0 {
				v = v[:i]
			}
			cur.Thread = strings.Trim(v, `"`)
		case line == "stackTrace = [":
			inStack = true
		case inStack && line == "]":
			inStack = false
		case inStack && line != "...":
			if i := strings.Index(line, " line:"); i > 0 {
				line = line[:i]
			}
			cur.Stack = append(cur.Stack, line)
		}
	}
	return out, sc.Err()
}

// JFRTop summarizes the samples of the .jfr files (each with its .window
// file, if any, limiting the samples to the cell's window): the share of
// samples by thread kind, by the innermost frame's method and package,
// and by the first ZooKeeper frame (the ZooKeeper code on whose behalf
// library code ran), top n of each.
func JFRTop(files []string, n int) (string, error) {
	var all []JFRSample
	for _, f := range files {
		day := time.Now()
		var from, to time.Time
		if b, err := os.ReadFile(strings.TrimSuffix(f, ".jfr") + ".window"); err == nil {
			lines := strings.Fields(string(b))
			if len(lines) == 2 {
				from, _ = time.Parse(time.RFC3339Nano, lines[0])
				to, _ = time.Parse(time.RFC3339Nano, lines[1])
				day = from
			}
		}
		cmd := exec.Command("jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "64", f)
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return "", err
		}
		if err := cmd.Start(); err != nil {
			return "", fmt.Errorf("jfr print %s: %w", f, err)
		}
		ss, perr := ParseJFRPrint(pipe, day)
		if err := cmd.Wait(); err != nil {
			return "", fmt.Errorf("jfr print %s: %w", f, err)
		}
		if perr != nil {
			return "", perr
		}
		for _, s := range ss {
			if !from.IsZero() && (s.At.Before(from) || s.At.After(to)) {
				continue
			}
			all = append(all, s)
		}
	}
	if len(all) == 0 {
		return "no execution samples in the windows\n", nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d execution samples (Java code running on a CPU) in %d file(s)\n", len(all), len(files))
	top := func(title string, key func(JFRSample) []string) {
		counts := map[string]int{}
		for _, s := range all {
			for _, k := range key(s) {
				counts[k]++
			}
		}
		type kv struct {
			k string
			v int
		}
		var kvs []kv
		for k, v := range counts {
			kvs = append(kvs, kv{k, v})
		}
		sort.Slice(kvs, func(i, j int) bool { return kvs[i].v > kvs[j].v || (kvs[i].v == kvs[j].v && kvs[i].k < kvs[j].k) })
		fmt.Fprintf(&b, "\n%s\n", title)
		for i, x := range kvs {
			if i == n {
				break
			}
			fmt.Fprintf(&b, "  %5.1f%%  %6d  %s\n", float64(x.v)*100/float64(len(all)), x.v, x.k)
		}
	}
	one := func(f func(JFRSample) string) func(JFRSample) []string {
		return func(s JFRSample) []string { return []string{f(s)} }
	}
	top("by thread kind", one(func(s JFRSample) string {
		return zkThreadKind(truncName(s.Thread)) + "  (" + threadFamily(s.Thread) + ")"
	}))
	top("by innermost frame", one(func(s JFRSample) string { return frame(s, 0) }))
	top("by innermost frame's package", one(func(s JFRSample) string { return pkgOf(frame(s, 0)) }))
	top("by first ZooKeeper frame (self and callees)", one(func(s JFRSample) string {
		for _, f := range s.Stack {
			if strings.HasPrefix(f, "org.apache.zookeeper.") {
				return f
			}
		}
		return "(no ZooKeeper frame) " + pkgOf(frame(s, 0))
	}))
	top("inclusive: every ZooKeeper method on the stack (once per sample)", func(s JFRSample) []string {
		seen := map[string]bool{}
		var out []string
		for _, f := range s.Stack {
			if strings.HasPrefix(f, "org.apache.zookeeper.") && !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
		return out
	})
	return b.String(), nil
}

func frame(s JFRSample, i int) string {
	if i < len(s.Stack) {
		return s.Stack[i]
	}
	return "(no frame)"
}

// pkgOf returns the package of a frame "pkg.Class.method(args)".
func pkgOf(f string) string {
	if i := strings.IndexByte(f, '('); i >= 0 {
		f = f[:i]
	}
	parts := strings.Split(f, ".")
	for i, p := range parts {
		if p != "" && p[0] >= 'A' && p[0] <= 'Z' {
			return strings.Join(parts[:i], ".")
		}
	}
	return f
}

// truncName is a Java thread's name as Linux shows it (15 bytes), for
// zkThreadKind.
func truncName(s string) string {
	if len(s) > 15 {
		return s[:15]
	}
	return s
}

// threadFamily drops a thread name's addresses and numbers
// ("NIOWorkerThread-3" → "NIOWorkerThread").
func threadFamily(s string) string {
	if i := strings.IndexAny(s, "-:(/#"); i > 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}
