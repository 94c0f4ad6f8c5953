//go:build unix

package procgroup

import (
	"os"
	"syscall"
)

// Signal sends sig to the process group p leads (p started with Attr).
func Signal(p *os.Process, sig syscall.Signal) error {
	return syscall.Kill(-p.Pid, sig)
}
