package kubelab

import "syscall"

// sysProcAttr puts a child into a process group of its own and has the
// kernel SIGKILL it when the thread that started it dies, so a killed test
// binary leaves nothing behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
