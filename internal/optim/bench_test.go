package optim

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/paramserv/paramserv/internal/parallel/goroutines"
)

// benchSetup builds rule name over n parameters with small random gradients.
func benchSetup(b *testing.B, name string, n int) (Rule, []float32, []float32, [][]float32) {
	b.Helper()
	r := mustNew(b, Config{Name: name, LearningRate: 1e-3, L1: 1e-4, L2: 1e-4})
	rng := rand.New(rand.NewPCG(1, 2))
	return r, randSlice(rng, n, 1, 0), randSlice(rng, n, 1e-2, 0), newState(r, n)
}

// BenchmarkUpdate times one Update over 1M parameters. The MB/s column is
// parameter bytes updated per second (4 per element); the memory traffic is
// that times 3 + 2*StateSlots (param, grad and each slot read; param and
// each slot written). ns/param is wall time and cpu-ns/param the process's
// CPU time a parameter (the figure to compare on a loaded machine;
// scripts/torch_adam_ns.py prints both for torch.optim.Adam).
func BenchmarkUpdate(b *testing.B) {
	const n = 1 << 20
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			r, param, grad, state := benchSetup(b, name, n)
			b.SetBytes(4 * n)
			step := int64(0)
			cpu0 := cpuNanos()
			for b.Loop() {
				step++
				r.Update(param, grad, state, step)
			}
			cpu1 := cpuNanos()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/param")
			if cpu0 >= 0 && cpu1 >= 0 {
				b.ReportMetric(float64(cpu1-cpu0)/float64(b.N)/n, "cpu-ns/param")
			}
		})
	}
}

// BenchmarkApplyParallel times Adam over 4M parameters on 1, 2 and 4
// workers; MB/s as in BenchmarkUpdate.
func BenchmarkApplyParallel(b *testing.B) {
	const n = 4 << 20
	r, param, grad, state := benchSetup(b, "adam", n)
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			b.SetBytes(4 * n)
			step := int64(0)
			for b.Loop() {
				step++
				ApplyParallel(r, param, grad, state, step, goroutines.Width(workers))
			}
		})
	}
}
