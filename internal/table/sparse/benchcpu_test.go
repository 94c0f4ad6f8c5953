package sparse

import (
	"syscall"
	"testing"
	"time"
)

// cpuNow is the CPU time the process has used (user and system), which a
// benchmark reports beside wall time: on a loaded machine it moves much
// less than wall time does.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds the CPU nanoseconds per key since cpu0 (cpuNow before the
// benchmark's loop) over batchesDone batches of benchBatch keys.
func reportCPU(b *testing.B, cpu0 time.Duration, batchesDone int) {
	b.ReportMetric(float64(cpuNow()-cpu0)/(float64(batchesDone)*benchBatch), "cpu-ns/key")
}
