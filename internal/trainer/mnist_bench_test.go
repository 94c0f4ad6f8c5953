package trainer

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/data/mnist"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/models/mlp"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/testutil"
)

// BenchmarkMNIST measures the PS overhead on the MNIST MLP (batch 100,
// hidden 100, Adam): examples per second per worker and the split of a step
// into compute, push and pull, for the same model trained in one process
// with no ps at all (single-process: the model and the rule alone;
// standalone: the trainer's loop over its in-process ps, the baseline), and
// through a ps on loopback with 1 and 2 workers.
// Everything runs in this process, so the workers and the ps share the
// machine's cores as a local cluster would. The single process and
// standalone multiply on every core (Model.SetParallel, as RunStandalone
// sets it), a worker of a ps on one goroutine.
//
//	go test -run ^$ -bench MNIST -benchtime 500x ./internal/trainer/
func BenchmarkMNIST(b *testing.B) {
	dir := testutil.DataDir(b, "mnist")
	data, err := mnist.Load(dir + "/mnist")
	if err != nil {
		b.Fatal(err)
	}
	adam := optim.Config{Name: "adam", LearningRate: 0.01}
	newModel := func(b *testing.B, worker, workers int) *mlp.Model {
		m, err := mlp.NewWithData(model.Config{Worker: worker, NumWorkers: workers, Seed: 1, BatchSize: 100, HiddenUnits: 100}, data)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}

	b.Run("single-process", func(b *testing.B) {
		m := newModel(b, 0, 1)
		m.SetParallel(true)
		rule, _ := optim.New(adam)
		p, g := m.Init(1), model.NewParams(m.Variables())
		state := map[string][][]float32{}
		for _, v := range m.Variables() {
			state[v.Name] = [][]float32{make([]float32, v.Size()), make([]float32, v.Size())}
		}
		var compute, apply time.Duration
		b.ResetTimer()
		for i := range b.N {
			t0 := time.Now()
			if _, err := m.ComputeGradients(p, g); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			for _, v := range m.Variables() {
				rule.Update(p[v.Name], g[v.Name], state[v.Name], int64(i+1))
			}
			compute += t1.Sub(t0)
			apply += time.Since(t1)
		}
		b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "examples/s/worker")
		b.ReportMetric(ms(compute, b.N), "compute-ms/step")
		b.ReportMetric(ms(apply, b.N), "apply-ms/step")
	})

	// The trainer's own loop with its ps in this process (RunStandalone's
	// localPS): the baseline of the figures below.
	b.Run("standalone", func(b *testing.B) {
		m := newModel(b, 0, 1)
		m.SetParallel(true) // as RunStandalone does
		cfg := Config{Config: lifecycle.Config{Optimizer: adam}, TrainSteps: int64(b.N), StepsToValidate: 1 << 62}
		cfg.defaults()
		ps, err := newLocalPS(cfg, m.Variables(), nil, m.Init(1))
		if err != nil {
			b.Fatal(err)
		}
		var st loopStats
		b.ResetTimer()
		if err := denseLoop(context.Background(), cfg, ps, m, model.NewParams(m.Variables()), nil, &st, false); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.local*100)/b.Elapsed().Seconds(), "examples/s/worker")
		b.ReportMetric(ms(st.compute, b.N), "compute-ms/step")
		b.ReportMetric(ms(st.comm, b.N), "apply-ms/step")
	})

	// The ratio the overlap is judged by: one worker through a ps against
	// standalone, run in turns of b.N/10 steps (alternating which goes
	// first) so that both see the same machine. Each turn of the ps side
	// starts with a pull and ends waiting for its last push, as a job does.
	b.Run("ps-1worker-vs-standalone", func(b *testing.B) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go server.ServeListener(ctx, lis, server.New(server.Config{NumWorkers: 1}))
		mPS, mSA := newModel(b, 0, 1), newModel(b, 0, 1)
		mSA.SetParallel(true) // as RunStandalone does
		c, err := client.New([]string{lis.Addr().String()}, mPS.Variables(), client.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if _, err := c.WaitReady(ctx, false); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Init(ctx, mPS.Init(1), client.InitOptions{Optimizer: adam, NumWorkers: 1}); err != nil {
			b.Fatal(err)
		}
		cfg := Config{Config: lifecycle.Config{Optimizer: adam}, StepsToValidate: 1 << 62}
		cfg.defaults()
		local, err := newLocalPS(cfg, mSA.Variables(), nil, mSA.Init(1))
		if err != nil {
			b.Fatal(err)
		}
		pPS, pSA := model.NewParams(mPS.Variables()), model.NewParams(mSA.Variables())
		const turns = 10
		per := int64(max(b.N/turns, 1))
		var tPS, tSA time.Duration
		var stPS, stSA loopStats
		run := func(ps psClient, m *mlp.Model, p model.Params, st *loopStats, t *time.Duration, overlap bool) {
			cfg := cfg
			cfg.TrainSteps = st.step + per
			t0 := time.Now()
			if err := denseLoop(ctx, cfg, ps, m, p, nil, st, overlap); err != nil {
				b.Fatal(err)
			}
			*t += time.Since(t0)
		}
		b.ResetTimer()
		for turn := range turns {
			if turn%2 == 0 {
				run(local, mSA, pSA, &stSA, &tSA, false)
				run(c, mPS, pPS, &stPS, &tPS, true)
			} else {
				run(c, mPS, pPS, &stPS, &tPS, true)
				run(local, mSA, pSA, &stSA, &tSA, false)
			}
		}
		ps, sa := float64(stPS.local*100)/tPS.Seconds(), float64(stSA.local*100)/tSA.Seconds()
		b.ReportMetric(ps, "ps-examples/s")
		b.ReportMetric(sa, "standalone-examples/s")
		b.ReportMetric(ps/sa, "ps/standalone")
	})

	// The trainer's loop through a ps on loopback, overlapping each step's
	// round trip with the next step's compute (the default in asynchronous
	// mode) or not; push-pull-ms is the time a worker waited for it.
	for _, tc := range []struct {
		name    string
		workers int
		overlap Overlap
	}{{"ps-1worker", 1, OverlapOn}, {"ps-1worker-nooverlap", 1, OverlapOff}, {"ps-2workers", 2, OverlapOn}, {"ps-2workers-nooverlap", 2, OverlapOff}} {
		b.Run(tc.name, func(b *testing.B) {
			workers := tc.workers
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go server.ServeListener(ctx, lis, server.New(server.Config{NumWorkers: workers}))
			addrs := []string{lis.Addr().String()}
			models := make([]*mlp.Model, workers)
			clients := make([]*client.Client, workers)
			for w := range workers {
				models[w] = newModel(b, w, workers)
				clients[w], err = client.New(addrs, models[w].Variables(), client.Options{Worker: w})
				if err != nil {
					b.Fatal(err)
				}
				defer clients[w].Close()
			}
			if _, err := clients[0].WaitReady(ctx, false); err != nil {
				b.Fatal(err)
			}
			if _, err := clients[0].Init(ctx, models[0].Init(1), client.InitOptions{Optimizer: adam, NumWorkers: workers}); err != nil {
				b.Fatal(err)
			}
			cfg := Config{Config: lifecycle.Config{Optimizer: adam}, TrainSteps: int64(b.N * workers), StepsToValidate: 1 << 62, Overlap: tc.overlap}
			cfg.defaults()
			var mu sync.Mutex
			var all loopStats
			var wg sync.WaitGroup
			b.ResetTimer()
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					m := models[w]
					var st loopStats
					if err := denseLoop(ctx, cfg, clients[w], m, model.NewParams(m.Variables()), nil, &st, overlaps(cfg, workers)); err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					all.local, all.compute, all.comm = all.local+st.local, all.compute+st.compute, all.comm+st.comm
					mu.Unlock()
				}()
			}
			wg.Wait()
			n := int(max(all.local, 1))
			b.ReportMetric(float64(all.local*100)/float64(workers)/b.Elapsed().Seconds(), "examples/s/worker")
			b.ReportMetric(ms(all.compute, n), "compute-ms/step")
			b.ReportMetric(ms(all.comm, n), "push-pull-ms/step")
		})
	}
}

func ms(d time.Duration, n int) float64 { return d.Seconds() * 1000 / float64(n) }
