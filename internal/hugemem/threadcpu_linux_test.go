package hugemem

import "golang.org/x/sys/unix"

// threadCPU is the calling thread's CPU time in nanoseconds.
func threadCPU() (int64, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return ts.Nano(), true
}
