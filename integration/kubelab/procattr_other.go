//go:build unix && !linux

package kubelab

import "syscall"

// sysProcAttr puts a child into a process group of its own.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
