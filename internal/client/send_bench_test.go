package client

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// BenchmarkCallDuringCompute is a one-worker sparse_lr step on a9a's
// scale (FTRL, a push of 100 rows and a pull of 100 others, with one dense
// value) made while the worker computes for 100 µs, as the overlap loop
// does: made by DoAsync (a goroutine writes it and reads the answer) and
// by Send (written by the caller, answer read in Wait). Reported: ns a
// step, compute included, and the CPU ms of the whole process (worker and
// ps) a step. The ps runs in this process, so this shows the hand-offs'
// cost, not the one of a second process:
//
//	go test -run '^$' -bench CallDuringCompute -benchtime 20000x ./internal/client/
func BenchmarkCallDuringCompute(b *testing.B) {
	for _, mode := range []string{"DoAsync", "Send"} {
		b.Run(mode, func(b *testing.B) {
			addrs := startPS(b, 1, 1)
			vars := []model.Variable{{Name: "b", Shape: []int{1}}}
			c, err := New(addrs, vars, Options{Tables: []model.Table{{Name: "w", Dim: 1}}})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if _, err := c.Init(ctx, model.NewParams(vars), InitOptions{Optimizer: optim.Config{Name: "ftrl", LearningRate: 0.2}, NumWorkers: 1}); err != nil {
				b.Fatal(err)
			}
			keys := [2][]uint64{make([]uint64, 100), make([]uint64, 100)}
			for i := range 100 {
				keys[0][i], keys[1][i] = uint64(i), uint64(100+i)
			}
			grads, vals := make([]float32, 100), make([]float32, 100)
			for i := range grads {
				grads[i] = 0.01
			}
			dense, params := model.Params{"b": {0.1}}, model.NewParams(vars)
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := range b.N {
				req := &Request{Push: true, Step: int64(i), Grads: dense, SparseGrads: []Rows{{Table: "w", Keys: keys[i%2], Values: grads}},
					Pull: true, Params: params, SparseParams: []Rows{{Table: "w", Keys: keys[(i+1)%2], Values: vals}}}
				var call *Call
				if mode == "Send" {
					call = c.Send(ctx, req)
				} else {
					call = c.DoAsync(ctx, req)
				}
				for t := time.Now(); time.Since(t) < 100*time.Microsecond; {
				}
				if err := call.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((cpuTime()-cpu0).Seconds()*1e3/float64(b.N), "cpu-ms/step")
		})
	}
}

// cpuTime is this process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
