package client

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// BenchmarkIncrementalDensePull is a push+pull of a model whose large
// part does not change (fine-tuning a head over frozen features: 4 MiB of
// weights with gradients of +0 under SGD, 256 KiB trained), and one where
// everything changes (Adam, the same sizes), full and incremental (the
// back-off on). Reported: reply bytes per call.
func BenchmarkIncrementalDensePull(b *testing.B) {
	for _, rule := range []string{"sgd-frozen", "adam"} {
		for _, incr := range []bool{false, true} {
			name := rule + "/full"
			if incr {
				name = rule + "/incremental"
			}
			b.Run(name, func(b *testing.B) { benchDenseIncr(b, rule, incr) })
		}
	}
}

func benchDenseIncr(b *testing.B, rule string, incr bool) {
	addrs := startPS(b, 1, 1)
	vars := []model.Variable{{Name: "frozen", Shape: []int{1 << 20}}, {Name: "head", Shape: []int{1 << 16}}}
	ctx := context.Background()
	var read atomic.Int64
	c, err := New(addrs, vars, Options{IncrementalPull: incr, Dial: countingDial(&read)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WaitReady(ctx, false); err != nil {
		b.Fatal(err)
	}
	opt := optim.Config{Name: "sgd", LearningRate: 0.01}
	if rule == "adam" {
		opt = optim.Config{Name: "adam", LearningRate: 0.001}
	}
	if _, err := c.Init(ctx, model.NewParams(vars), InitOptions{Optimizer: opt, NumWorkers: 1}); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	grads := model.NewParams(vars)
	for i := range grads["head"] {
		grads["head"][i] = float32(rng.NormFloat64())
	}
	if rule == "adam" {
		for i := range grads["frozen"] {
			grads["frozen"][i] = float32(rng.NormFloat64())
		}
	}
	params := model.NewParams(vars)
	b.ResetTimer()
	read.Store(0)
	for step := range b.N {
		call := c.Do(ctx, &Request{Push: true, Pull: true, Step: int64(step), Grads: grads, Params: params})
		if call.Err != nil {
			b.Fatal(call.Err)
		}
	}
	b.ReportMetric(float64(read.Load())/float64(b.N), "B/call")
}
