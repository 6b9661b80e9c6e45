package bench

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes the host a run measured on.
type Machine struct {
	Date       string     `json:"date"`
	NProc      int        `json:"nproc"`
	CPUModel   string     `json:"cpu_model"`
	MemTotalGB float64    `json:"mem_total_gb"`
	Kernel     string     `json:"kernel"`
	Go         string     `json:"go"`
	Java       string     `json:"java"`
	ZooKeeper  string     `json:"zookeeper"`
	LoadStart  [3]float64 `json:"load_start"`
	LoadEnd    [3]float64 `json:"load_end"`
}

// DescribeMachine reads the machine description from /proc and the tools.
func DescribeMachine() Machine {
	m := Machine{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), NProc: runtime.NumCPU(), Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					kb, _ := strconv.ParseFloat(f[0], 64)
					m.MemTotalGB = kb / (1 << 20)
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.Go = strings.TrimSpace(strings.TrimPrefix(string(out), "go version "))
	}
	if out, err := exec.Command("java", "-version").CombinedOutput(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) > 1 {
			m.Java = strings.TrimSpace(lines[1])
		} else if len(lines) == 1 {
			m.Java = strings.TrimSpace(lines[0])
		}
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "zookeeper").Output(); err == nil {
		m.ZooKeeper = "Debian zookeeper " + strings.TrimSpace(string(out))
	}
	m.LoadStart = loadAvg()
	return m
}
