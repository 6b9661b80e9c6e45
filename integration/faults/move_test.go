package faults

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/testutil/testcerts"
)

// Moving the cluster to another root while it serves (`zketcd move`),
// under the standard workload: each fault is a move of the root the
// cluster runs on to a new root of the same ensemble, with something
// killed during it. The instances keep their --zk-root: one restarted
// follows the moves from there.

// mover is one run of `zketcd move`, its output appended to a file of
// the scenario's, its lines matched against marks as they come.
type mover struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // once done

	mu    sync.Mutex
	lines []string
	seen  map[string]chan struct{}
}

// moverMarks are the mover's log lines a scenario waits for.
const (
	markBase    = "copying the source's base generation"
	markCopying = "destination at"
	markFenced  = "source fenced"
)

// startMover runs `zketcd move` of the cluster's current root into to,
// straight to the ensemble's members.
func (cl *cluster) startMover(t *testing.T, to string) *mover {
	from := cl.root
	if cl.moved != "" {
		from = cl.moved
	}
	lf, err := os.OpenFile(filepath.Join(cl.dir, "zketcd-move.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(lf, "---- faults: move %s -> %s at %s ----\n", from, to, time.Now().Format(time.RFC3339Nano))
	args := []string{"move", "--zk-root", from}
	if cl.tenant != "" {
		// The fleet's registry names where the tenant's data lives.
		args = []string{"tenant", "move", cl.tenant, "--zk-root", cl.root}
	}
	cmd := exec.Command(zketcdBin, append(args, "--zk", strings.Join(cl.ens.Addrs(), ","), "--to-root", to,
		"--release-timeout", "90s", "--log-level", "info")...)
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	m := &mover{cmd: cmd, done: make(chan struct{}), seen: map[string]chan struct{}{}}
	for _, mark := range []string{markBase, markCopying, markFenced} {
		m.seen[mark] = make(chan struct{})
	}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // Pdeathsig: see Zketcd.start
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(lf, line)
			m.mu.Lock()
			m.lines = append(m.lines, line)
			for mark, ch := range m.seen {
				if strings.Contains(line, mark) {
					close(ch)
					delete(m.seen, mark)
				}
			}
			m.mu.Unlock()
		}
		m.err = cmd.Wait()
		lf.Close()
		close(m.done)
	}()
	if err := <-started; err != nil {
		lf.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.kill() })
	return m
}

// wait waits for the mark (true), or for the mover to end or d to pass.
func (m *mover) wait(mark string, d time.Duration) bool {
	m.mu.Lock()
	ch, ok := m.seen[mark]
	m.mu.Unlock()
	if !ok {
		return true
	}
	select {
	case <-ch:
		return true
	case <-m.done:
		return false
	case <-time.After(d):
		return false
	}
}

// kill kills -9 the mover if it runs, and waits for it.
func (m *mover) kill() {
	select {
	case <-m.done:
		return
	default:
	}
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	<-m.done
}

// finish waits up to d for the mover to end; its error says how it did.
func (m *mover) finish(d time.Duration) error {
	select {
	case <-m.done:
	case <-time.After(d):
		m.kill()
		return fmt.Errorf("zketcd move still running after %v", d)
	}
	if m.err != nil {
		m.mu.Lock()
		tail := m.lines[max(0, len(m.lines)-5):]
		m.mu.Unlock()
		return fmt.Errorf("zketcd move: %v: %s", m.err, strings.Join(tail, "\n"))
	}
	return nil
}

// fleet makes the cluster's root a fleet with tenant name, served to a
// client certificate of the test CA: it creates the tenant and returns the
// instances' serve flags and the clients' TLS configuration.
func (cl *cluster) fleet(t *testing.T, name string) ([]string, *tls.Config) {
	certs := testcerts.New(t)
	out, err := exec.Command(zketcdBin, "tenant", "create", name, "--cn", "client",
		"--zk", strings.Join(cl.ens.Addrs(), ","), "--zk-root", cl.root, "--log-level", "warn").CombinedOutput()
	if err != nil {
		t.Fatalf("zketcd tenant create %s: %v: %s", name, err, out)
	}
	cl.tenant = name
	return []string{"--tenants", "--cert-file", certs.ServerCert, "--key-file", certs.ServerKey,
		"--trusted-ca-file", certs.CAFile, "--client-cert-auth"}, certs.ClientTLS(t, true)
}

// nextRoot is the root the next move goes to.
func (cl *cluster) nextRoot() string { return fmt.Sprintf("%s-moved-%d", cl.root, cl.moves+1) }

// moveDone records that the cluster now runs on to.
func (cl *cluster) moveDone(to string) {
	cl.moved = to
	cl.moves++
}

// finishMove runs the mover to the end, once more if the one given failed
// (a mover stopped by a fault is run again, as the operator would).
func (cl *cluster) finishMove(t *testing.T, m *mover, to string) {
	if err := m.finish(3 * time.Minute); err != nil {
		t.Logf("the move did not finish (%v); running it again", err)
		if err := cl.startMover(t, to).finish(3 * time.Minute); err != nil {
			t.Fatalf("move %s again: %v", to, err)
		}
	}
	cl.moveDone(to)
}

// moveMoverKill kills -9 the mover at a point that turns with each fault:
// 0-300 ms into its copy of the base generation, 0-300 ms into its copy
// of the log, or right after it fenced the source (writes then wait until
// it runs again); how far it got is said. It runs again at the heal.
func moveMoverKill(t *testing.T, cl *cluster) (string, func()) {
	to := cl.nextRoot()
	m := cl.startMover(t, to)
	mark := []string{markBase, markCopying, markFenced}[cl.moves%3]
	if !m.wait(mark, time.Minute) {
		t.Fatalf("the mover did not log %q: %v", mark, m.finish(time.Second))
	}
	if mark != markFenced {
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
	}
	m.kill()
	at := "copying the base generation"
	switch {
	case m.wait(markFenced, 0):
		at = "after the fence"
	case m.wait(markCopying, 0):
		at = "copying the log, before the fence"
	}
	return fmt.Sprintf("zketcd move to %s, kill -9 the mover mid-copy (%s), run it again", to, at), func() {
		if err := cl.startMover(t, to).finish(3 * time.Minute); err != nil {
			t.Fatalf("move %s again: %v", to, err)
		}
		cl.moveDone(to)
	}
}

// moveZketcdKill kills -9 zketcd A as the mover fences the source (A then
// switches roots, or is about to), and restarts it with its --zk-root at
// the heal; the mover finishes once A's session expired.
func moveZketcdKill(t *testing.T, cl *cluster) (string, func()) {
	to := cl.nextRoot()
	m := cl.startMover(t, to)
	if !m.wait(markFenced, time.Minute) {
		t.Fatalf("the mover did not fence: %v", m.finish(time.Second))
	}
	if err := cl.a.Kill(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("zketcd move to %s, kill -9 zketcd A at the fence, restart it (--zk-root %s)", to, cl.root), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := cl.a.Start(ctx); err != nil {
			t.Fatalf("restart zketcd A: %v", err)
		}
		cl.finishMove(t, m, to)
	}
}

// moveZKLeaderKill kills -9 the ZooKeeper leader while the mover copies,
// restarts it at the heal, and waits for the mover (run again if the
// fault stopped it).
func moveZKLeaderKill(t *testing.T, cl *cluster) (string, func()) {
	to := cl.nextRoot()
	m := cl.startMover(t, to)
	if !m.wait(markCopying, time.Minute) {
		t.Fatalf("the mover did not start copying: %v", m.finish(time.Second))
	}
	time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
	what, heal := killZKMember(true)(t, cl)
	return fmt.Sprintf("zketcd move to %s, %s mid-move, restart it", to, what), func() {
		heal()
		cl.finishMove(t, m, to)
	}
}
