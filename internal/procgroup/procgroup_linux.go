package procgroup

import "syscall"

// Attr is the SysProcAttr of a child in a group of its own that the kernel
// kills when this process dies.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
