package trainer

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/data/synth"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/models/sparselr"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/testutil"
)

// BenchmarkSparseLR measures sparse training through a ps: sparse_lr
// (FTRL 0.2) trained by one worker through a ps on loopback
// against the same model trained by the same loop (sparseLoop) on the
// standalone job's in-process shard, with no server or socket. Both run in
// this process in turns of b.N/10 steps, alternating which goes first, so
// that both see the same machine; each model's data is loaded before the
// timer starts, so the figures are steady-state steps, not start-up.
//
//   - a9a: the LIBSVM a9a set (123 features, 14 nonzeros a row), from
//     $PARAMSERV_DATA/a9a, batch 100.
//   - synth-ctr: 200k rows of 26 categorical fields with Zipf-skewed values
//     (synth.DefaultConfig), generated into a temporary directory, batch
//     1000 (README's synth-ctr job).
//
// ps/standalone is examples/s per worker through the ps over standalone's.
// The worker through the ps overlaps its round trips with its compute (as
// a one-worker asynchronous job does by default), or not (-nooverlap);
// standalone never does (its calls return when done).
//
//	go test -run ^$ -bench SparseLR -benchtime 3000x ./internal/trainer/
func BenchmarkSparseLR(b *testing.B) {
	for _, overlap := range []bool{true, false} {
		name := "ps-1worker-vs-standalone"
		if !overlap {
			name = "ps-1worker-nooverlap-vs-standalone"
		}
		b.Run("a9a/"+name, func(b *testing.B) {
			dir := testutil.DataDir(b, "a9a/a9a")
			benchSparseVsStandalone(b, model.Config{
				BatchSize: 100, Seed: 3, DataDir: dir, TrainData: "a9a/a9a", InputFormat: "libsvm", NumFeatures: 123,
			}, overlap)
		})
		b.Run("synth-ctr/"+name, func(b *testing.B) {
			dir := b.TempDir()
			sc := synth.DefaultConfig()
			sc.Out, sc.Rows, sc.Shards, sc.TestRows = dir, 200_000, 1, 1000
			if _, err := synth.Generate(context.Background(), sc); err != nil {
				b.Fatal(err)
			}
			benchSparseVsStandalone(b, model.Config{
				BatchSize: 1000, Seed: 3, DataDir: dir, TrainData: "part-00000.tsv", InputFormat: "criteo", CatFields: 26,
			}, overlap)
		})
	}
}

// benchSparseVsStandalone runs one comparison; overlap: the worker through
// the ps overlaps its round trips with its compute (sparseOverlapLoop), as
// a one-worker asynchronous job does by default.
func benchSparseVsStandalone(b *testing.B, data model.Config, overlap bool) {
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
	cfg := Config{Optimizer: ftrl, StepsToValidate: 1 << 62}
	cfg.defaults()
	local, err := newLocalPS(cfg, mSA.Variables(), mSA.Tables(), mSA.Init(1))
	if err != nil {
		b.Fatal(err)
	}
	pPS, pSA := model.NewParams(mPS.Variables()), model.NewParams(mSA.Variables())
	const turns = 10
	per := int64(max(b.N/turns, 1))
	var tPS, tSA time.Duration
	var stPS, stSA loopStats
	run := func(ps psClient, m *sparselr.Model, p model.Params, st *loopStats, t *time.Duration) {
		cfg := cfg
		cfg.TrainSteps = st.step + per
		t0 := time.Now()
		_, remote := ps.(*client.Client)
		if err := sparseLoop(ctx, cfg, ps, m, p, nil, st, overlap && remote); err != nil {
			b.Fatal(err)
		}
		*t += time.Since(t0)
	}
	// One turn each before the timer: the first rows of a table are
	// created, not found.
	run(local, mSA, pSA, &stSA, new(time.Duration))
	run(c, mPS, pPS, &stPS, new(time.Duration))
	stPS.local, stSA.local, stPS.compute, stSA.compute, stPS.comm, stSA.comm = 0, 0, 0, 0, 0, 0
	b.ResetTimer()
	for turn := range turns {
		if turn%2 == 0 {
			run(local, mSA, pSA, &stSA, &tSA)
			run(c, mPS, pPS, &stPS, &tPS)
		} else {
			run(c, mPS, pPS, &stPS, &tPS)
			run(local, mSA, pSA, &stSA, &tSA)
		}
	}
	bs := float64(data.BatchSize)
	ps, sa := float64(stPS.local)*bs/tPS.Seconds(), float64(stSA.local)*bs/tSA.Seconds()
	b.ReportMetric(ps, "ps-examples/s")
	b.ReportMetric(sa, "standalone-examples/s")
	b.ReportMetric(ps/sa, "ps/standalone")
	b.ReportMetric(ms(stPS.compute, int(max(stPS.local, 1))), "ps-compute-ms/step")
	b.ReportMetric(ms(stPS.comm, int(max(stPS.local, 1))), "ps-push-pull-ms/step")
	b.ReportMetric(ms(stSA.compute, int(max(stSA.local, 1))), "standalone-compute-ms/step")
	b.ReportMetric(ms(stSA.comm, int(max(stSA.local, 1))), "standalone-apply-ms/step")
}
