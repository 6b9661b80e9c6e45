package etcdctl

import "syscall"

// sysProcAttr puts a server into a process group of its own and has the
// kernel SIGKILL it if the thread that started it dies, so a killed test
// binary leaves no server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
