//go:build unix

package trainer

import (
	"syscall"
	"time"
)

// processCPU is the process's user and system CPU time so far: the result
// file gives the training's beside its wall time, which on a loaded machine
// says more of what it cost.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
