package zkserver

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// sysProcAttr puts the JVM into a process group of its own (so that signals
// reach it and anything it spawns) and asks the kernel to SIGKILL it when
// the thread that started it dies, so that a crashed or killed test binary
// leaves no ZooKeeper behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until every thread of process pid is stopped (state T
// in /proc), so that Pause returns only once the server no longer runs:
// SIGSTOP is delivered asynchronously. It gives up silently after timeout.
func waitStopped(pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	taskDir := "/proc/" + strconv.Itoa(pid) + "/task"
	for time.Now().Before(deadline) {
		if allTasksStopped(taskDir) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func allTasksStopped(taskDir string) bool {
	tasks, err := os.ReadDir(taskDir)
	if err != nil {
		return true // the process is gone; nothing to wait for
	}
	for _, task := range tasks {
		b, err := os.ReadFile(taskDir + "/" + task.Name() + "/stat")
		if err != nil {
			continue // the thread exited
		}
		// The state follows the command name, which is in parentheses and
		// may itself contain ") ".
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false
		}
		if state := b[i+2]; state != 'T' && state != 't' && state != 'Z' && state != 'X' {
			return false
		}
	}
	return true
}
