package procgroup

import (
	"os"
	"syscall"
)

// Attr is nil: Windows has no process groups to signal.
func Attr() *syscall.SysProcAttr { return nil }

// Signal kills p: Windows cannot deliver SIGTERM or SIGINT to another
// process, so every signal ends it at once.
func Signal(p *os.Process, _ syscall.Signal) error {
	return p.Kill()
}
