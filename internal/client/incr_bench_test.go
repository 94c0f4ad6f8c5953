package client

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// BenchmarkIncrementalPull is sparse_lr's round trip, a push of one
// batch's rows and a pull of the next batch's (Zipf-skewed keys, 11k a
// batch), full and incremental, alternating in one run. Reported: reply
// bytes per call.
func BenchmarkIncrementalPull(b *testing.B) {
	for _, l1 := range []float64{0, 1} {
		for _, incr := range []bool{false, true} {
			name := "full"
			if incr {
				name = "incremental"
			}
			if l1 > 0 {
				name += "-l1"
			}
			b.Run(name, func(b *testing.B) { benchIncr(b, incr, l1) })
		}
	}
}

func benchIncr(b *testing.B, incr bool, l1 float64) {
	addrs := startPS(b, 1, 1)
	vars := []model.Variable{{Name: "b", Shape: []int{1}}}
	tables := []model.Table{{Name: "w", Dim: 1}}
	ctx := context.Background()
	var read struct{ n atomic.Int64 }
	c, err := New(addrs, vars, Options{Tables: tables, IncrementalPull: incr, Dial: countingDial(&read.n)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WaitReady(ctx, false); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Init(ctx, model.NewParams(vars), InitOptions{Optimizer: optim.Config{Name: "ftrl", LearningRate: 0.2, L1: l1}, NumWorkers: 1}); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(rng, 1.1, 1, 1<<21)
	batch := func() []uint64 {
		seen := map[uint64]bool{}
		var keys []uint64
		for range 26000 {
			k := z.Uint64()
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		return keys
	}
	const nb = 64
	batches := make([][]uint64, nb)
	for i := range batches {
		batches[i] = batch()
	}
	cur := batches[0]
	vals := make([]float32, len(cur))
	b.ResetTimer()
	start := read.n.Load()
	for i := range b.N {
		next := batches[(i+1)%nb]
		grads := make([]float32, len(cur))
		for j := range grads {
			grads[j] = float32(rng.NormFloat64()) * 0.1
		}
		nv := make([]float32, len(next))
		call := c.Do(ctx, &Request{Push: true, Pull: true, Step: int64(i),
			SparseGrads: []Rows{{Table: "w", Keys: cur, Values: grads}}, SparseParams: []Rows{{Table: "w", Keys: next, Values: nv}}})
		if call.Err != nil {
			b.Fatal(call.Err)
		}
		cur, vals = next, nv
	}
	_ = vals
	b.ReportMetric(float64(read.n.Load()-start)/float64(b.N), "B_read/op")
}
