//go:build unix && !linux

package procgroup

import "syscall"

// Attr is the SysProcAttr of a child in a group of its own. Without Linux's
// Pdeathsig, a child outlives a launcher that is killed with SIGKILL.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
