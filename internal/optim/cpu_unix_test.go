//go:build unix

package optim

import "syscall"

// cpuNanos is the process's user and system CPU time so far, for the
// benchmarks' CPU figures: on a loaded machine wall time counts the waits
// for a core, CPU time does not.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
