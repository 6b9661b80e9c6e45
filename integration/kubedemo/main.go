// Command kubedemo runs the experiment "kube-apiserver on ZooKeeper" (the
// same steps as the e2e test, from package kubelab) and prints it as a lab
// notebook: what was started, what was measured, what was checked.
//
//	make demo
//	go run ./kubedemo -kube-apiserver PATH [-zketcd PATH] [-dir DIR]
//
// It exits with status 1 if a check fails.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/zketcd/zketcd/integration/kubelab"
)

func main() {
	kube := flag.String("kube-apiserver", os.Getenv("KUBE_APISERVER"), "kube-apiserver binary (integration/kube/build-kube-apiserver.sh prints it)")
	zketcd := flag.String("zketcd", os.Getenv("ZKETCD_BINARY"), "zketcd binary (default: build cmd/zketcd)")
	dir := flag.String("dir", "", "keep every log and data file in this directory (default: a temporary directory, removed)")
	flag.Parse()
	if *kube == "" {
		fmt.Fprintln(os.Stderr, "kubedemo: give -kube-apiserver or set KUBE_APISERVER (make demo does)")
		os.Exit(2)
	}
	os.Exit(run(*kube, *zketcd, *dir))
}

func run(kube, zketcd, dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	keep := dir != ""
	if !keep {
		d, err := os.MkdirTemp("", "kubedemo-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		dir = d
		defer os.RemoveAll(dir)
	}
	if zketcd == "" {
		var err error
		if zketcd, err = kubelab.BuildZketcd(ctx, dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	kv, _ := exec.Command(kube, "--version").Output()
	zv, _ := exec.Command(zketcd, "version").Output()

	fmt.Printf("# kube-apiserver on ZooKeeper: lab notebook, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Printf("%s (%s)\n%s (%s)\nZooKeeper: Debian's package (/usr/share/java/zookeeper.jar), Java: %s\n",
		strings.TrimSpace(string(kv)), kube, strings.TrimSpace(string(zv)), zketcd, javaVersion())
	fmt.Printf("etcd for comparison: embedded go.etcd.io/etcd/server/v3 3.7.3; host: %d CPUs, %s/%s, %s\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Printf("files: %s%s\n", dir, map[bool]string{true: " (kept)", false: " (removed at the end)"}[keep])

	lab, err := kubelab.New(dir, kube, zketcd, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer lab.Close()
	x := kubelab.NewExperiment(lab)
	say := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		fmt.Println("  " + strings.ReplaceAll(s, "\n", "\n  "))
	}
	failed := 0
	start := time.Now()
	for i, s := range kubelab.Steps() {
		if ctx.Err() != nil {
			break
		}
		fmt.Printf("\n## %d. %s\n\n", i+1, s.Title)
		stepStart := time.Now()
		logsBefore := len(lab.LogFiles())
		if err := s.Run(ctx, x, say); err != nil {
			failed++
			fmt.Printf("\n  FAIL (%s): %v\n", time.Since(stepStart).Round(time.Millisecond), err)
			for _, f := range lab.LogFiles()[logsBefore:] {
				fmt.Printf("  last lines of %s:\n%s\n", f, indent(kubelab.TailLog(f, 10), "    "))
			}
			continue
		}
		fmt.Printf("\n  ok (%s)\n", time.Since(stepStart).Round(time.Millisecond))
	}
	fmt.Printf("\n## Summary (%d steps, %d failed, %s)\n\n", len(kubelab.Steps()), failed, time.Since(start).Round(time.Second))
	for _, line := range x.Summary() {
		fmt.Println("- " + line)
	}
	if ctx.Err() != nil {
		fmt.Println("\ninterrupted")
		return 130
	}
	if failed > 0 {
		return 1
	}
	return 0
}

func javaVersion() string {
	out, err := exec.Command("java", "-version").CombinedOutput()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}
