package trainer

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/data/synth"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/models/sparselr"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/testutil"
)

// BenchmarkSparseLR measures sparse training through a ps: sparse_lr
// (FTRL 0.2) trained by one worker through a ps on loopback
// against the same model trained by the same loop (sparseLoop) on the
// standalone job's in-process shard, with no server or socket. All run in
// this process in turns of b.N/30 steps, rotating which goes first, so
// that all see the same machine; each model's data is loaded before the
// timer starts, so the figures are steady-state steps, not start-up.
//
//   - a9a: the LIBSVM a9a set (123 features, 14 nonzeros a row), from
//     $PARAMSERV_DATA/a9a, batch 100.
//   - synth-ctr: 200k rows of 26 categorical fields with Zipf-skewed values
//     (synth.DefaultConfig), generated into a temporary directory, batch
//     1000 (README's synth-ctr job).
//
// ps/standalone is examples/s per worker through the ps, overlapping its
// round trips with its compute (as a one-worker asynchronous job does by
// default), over standalone's; nooverlap/standalone the same without the
// overlap, in the same turns (standalone's calls return when done: it
// never overlaps). cpu-ms/step is the CPU time of the whole process (the
// worker, and the ps or the standalone shard) per step: what the machine
// must give each step, whatever the other load on it.
//
//	go test -run ^$ -bench SparseLR -benchtime 3000x ./internal/trainer/
func BenchmarkSparseLR(b *testing.B) {
	b.Run("a9a/ps-1worker-vs-standalone", func(b *testing.B) {
		dir := testutil.DataDir(b, "a9a/a9a")
		benchSparseVsStandalone(b, model.Config{
			BatchSize: 100, Seed: 3, DataDir: dir, TrainData: "a9a/a9a", InputFormat: "libsvm", NumFeatures: 123,
		})
	})
	b.Run("synth-ctr/ps-1worker-vs-standalone", func(b *testing.B) {
		dir := b.TempDir()
		sc := synth.DefaultConfig()
		sc.Out, sc.Rows, sc.Shards, sc.TestRows = dir, 200_000, 1, 1000
		if _, err := synth.Generate(context.Background(), sc); err != nil {
			b.Fatal(err)
		}
		benchSparseVsStandalone(b, model.Config{
			BatchSize: 1000, Seed: 3, DataDir: dir, TrainData: "part-00000.tsv", InputFormat: "criteo", CatFields: 26,
		})
	})
}

func benchSparseVsStandalone(b *testing.B, data model.Config) {
	ftrl := optim.Config{Name: "ftrl", LearningRate: 0.2}
	newModel := func() *sparselr.Model {
		d := data
		d.Worker, d.NumWorkers = 0, 1
		m, err := sparselr.New(d)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	mPS, mSA := newModel(), newModel()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go server.ServeListener(ctx, lis, server.New(server.Config{NumWorkers: 1}))
	c, err := client.New([]string{lis.Addr().String()}, mPS.Variables(), client.Options{Tables: mPS.Tables()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WaitReady(ctx, false); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Init(ctx, mPS.Init(1), client.InitOptions{Optimizer: ftrl, NumWorkers: 1}); err != nil {
		b.Fatal(err)
	}
	cfg := Config{Config: lifecycle.Config{Optimizer: ftrl}, StepsToValidate: 1 << 62}
	cfg.defaults()
	local, err := newLocalPS(cfg, mSA.Variables(), mSA.Tables(), mSA.Init(1))
	if err != nil {
		b.Fatal(err)
	}
	pPS, pSA := model.NewParams(mPS.Variables()), model.NewParams(mSA.Variables())
	// Three contenders, in turns of b.N/turns steps, the order rotated
	// every turn: standalone, the worker through the ps with the overlap
	// (a one-worker job's default), and without it. Both ps turns train
	// the same job (model, parameters, tables) in turn.
	type contender struct {
		ps      psClient
		m       *sparselr.Model
		p       model.Params
		overlap bool
		st      loopStats
		t, cpu  time.Duration // wall time; the process's CPU time (worker and ps)
	}
	sa := &contender{ps: local, m: mSA, p: pSA}
	ov := &contender{ps: c, m: mPS, p: pPS, overlap: true}
	no := &contender{ps: c, m: mPS, p: pPS}
	const turns = 30
	per := int64(max(b.N/turns, 1))
	run := func(k *contender, timed bool) {
		cfg := cfg
		k.st.step = max(k.st.step, ov.st.step, no.st.step) // the ps turns share one job
		cfg.TrainSteps = k.st.step + per
		t0, c0 := time.Now(), cpuTime()
		if err := sparseLoop(ctx, cfg, k.ps, k.m, k.p, nil, &k.st, k.overlap); err != nil {
			b.Fatal(err)
		}
		if timed {
			k.t += time.Since(t0)
			k.cpu += cpuTime() - c0
		}
	}
	// One turn each before the timer: the first rows of a table are
	// created, not found.
	all := []*contender{sa, ov, no}
	for _, k := range all {
		run(k, false)
		k.st.local, k.st.compute, k.st.comm = 0, 0, 0
	}
	b.ResetTimer()
	for turn := range turns {
		for i := range all {
			run(all[(turn+i)%len(all)], true)
		}
	}
	bs := float64(data.BatchSize)
	rate := func(k *contender) float64 { return float64(k.st.local) * bs / k.t.Seconds() }
	perStep := func(d time.Duration, k *contender) float64 { return ms(d, int(max(k.st.local, 1))) }
	b.ReportMetric(rate(ov), "ps-examples/s")
	b.ReportMetric(rate(no), "nooverlap-examples/s")
	b.ReportMetric(rate(sa), "standalone-examples/s")
	b.ReportMetric(rate(ov)/rate(sa), "ps/standalone")
	b.ReportMetric(rate(no)/rate(sa), "nooverlap/standalone")
	b.ReportMetric(perStep(ov.st.compute, ov), "ps-compute-ms/step")
	b.ReportMetric(perStep(ov.st.comm, ov), "ps-push-pull-ms/step")
	b.ReportMetric(perStep(no.st.compute, no), "nooverlap-compute-ms/step")
	b.ReportMetric(perStep(no.st.comm, no), "nooverlap-push-pull-ms/step")
	b.ReportMetric(perStep(sa.st.compute, sa), "standalone-compute-ms/step")
	b.ReportMetric(perStep(sa.st.comm, sa), "standalone-apply-ms/step")
	b.ReportMetric(perStep(ov.cpu, ov), "ps-cpu-ms/step")
	b.ReportMetric(perStep(no.cpu, no), "nooverlap-cpu-ms/step")
	b.ReportMetric(perStep(sa.cpu, sa), "standalone-cpu-ms/step")
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
