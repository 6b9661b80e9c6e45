//go:build unix && !linux

package zkserver

import (
	"syscall"
	"time"
)

// sysProcAttr puts the JVM into a process group of its own, so that signals
// reach it and anything it spawns.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitStopped would wait until the process is stopped; without /proc it
// cannot tell, so it returns at once.
func waitStopped(int, time.Duration) {}
