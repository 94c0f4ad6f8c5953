//go:build unix

package server

import "syscall"

// processCPU is the process's user and system CPU time so far, in
// nanoseconds: the save's and the restore's log lines give theirs beside
// their wall time, which on a loaded machine says more of what they cost.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
