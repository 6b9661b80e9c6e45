package kubelab

import (
	"context"
	"fmt"
	"regexp"
	"time"
)

// SeedTimeout is how long the seed failure may run before it is killed.
const SeedTimeout = 90 * time.Second

func stepSeedFailure(ctx context.Context, x *Experiment, say func(string, ...any)) error {
	if x.ZK == nil {
		return fmt.Errorf("needs ZooKeeper (step ready-zketcd failed)")
	}
	s, err := x.Lab.StartAPIServer(APIServerOptions{Name: "on-zookeeper-port", EtcdServers: "http://" + x.ZK.Addr()})
	if err != nil {
		return err
	}
	defer s.Kill()
	ready := false
	_ = waitFor(ctx, SeedTimeout, 250*time.Millisecond, "exit", func() (bool, error) {
		if done, _, _ := s.Exited(); done {
			return true, nil
		}
		if st, _, err := s.Do(ctx, "GET", "/readyz", nil, ""); err == nil && st == 200 {
			ready = true
		}
		return false, nil
	})
	done, code, after := s.Exited()
	if !done {
		s.Kill()
		say("kube-apiserver --etcd-servers=http://%s still running after %s: killed", x.ZK.Addr(), SeedTimeout)
	}
	fatal := s.Grep(regexp.MustCompile(`command failed|^F\d{4} `), 2)
	transport := s.Grep(regexp.MustCompile(`createTransport failed`), 1)
	if done {
		say("kube-apiserver --etcd-servers=http://%s (ZooKeeper's client port): never ready, exited with status %d after %s", x.ZK.Addr(), code, ms(after))
	}
	say("its last fatal line: %s", lastLine(fatal))
	say("its etcd client meanwhile: %s", lastLine(transport))
	if ready {
		return fmt.Errorf("kube-apiserver became ready against ZooKeeper's client port")
	}
	if done && code == 0 {
		return fmt.Errorf("kube-apiserver exited with status 0 against ZooKeeper's client port")
	}
	if done && !etcdFailure.MatchString(lastLine(fatal)) {
		return fmt.Errorf("kube-apiserver exited, but not for its storage (fatal line: %s)", lastLine(fatal))
	}
	how := fmt.Sprintf("exit status %d after %s", code, ms(after))
	if !done {
		how = "never ready, killed after " + SeedTimeout.String()
	}
	x.Note("seed failure (kube-apiserver on ZooKeeper's port): %s: %s", how, shortFatal(fatal))
	return nil
}

var (
	fatalMsg    = regexp.MustCompile(`err="([^"]*)"`)
	etcdFailure = regexp.MustCompile(`(?i)etcd|storage`)
)

func shortFatal(lines []string) string {
	if len(lines) == 0 {
		return "(no fatal line)"
	}
	if m := fatalMsg.FindStringSubmatch(lines[len(lines)-1]); m != nil {
		return m[1]
	}
	return lastLine(lines)
}
