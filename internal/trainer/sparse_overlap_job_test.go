package trainer

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/progress"
	"github.com/paramserv/paramserv/internal/testutil"
)

// pushCounter is a ps Observer that counts the pushes by verdict.
type pushCounter struct {
	mu       sync.Mutex
	verdicts map[string]int
}

func (p *pushCounter) Pushed(verdict string, _, _ int, _ time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.verdicts == nil {
		p.verdicts = map[string]int{}
	}
	p.verdicts[verdict]++
}
func (p *pushCounter) of(v string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.verdicts[v]
}
func (*pushCounter) Rejected(string)                                      {}
func (*pushCounter) Pulled(int, int, time.Duration)                       {}
func (*pushCounter) SyncWaited(time.Duration)                             {}
func (*pushCounter) CheckpointSaved(int64, time.Duration, error)          {}
func (*pushCounter) CheckpointRestored(bool, int64, time.Duration, error) {}
func (*pushCounter) RestoreProgress(progress.Update)                      {}

// With the overlap, 2 sparse_lr workers on real loopback sockets have every
// batch they compute up to the goal pushed and applied exactly once: the
// ps counts as many pushes (applied, or dropped as stale under
// --max_staleness, or past the goal) as the workers landed steps, and
// nothing is applied past the goal.
func TestSparseOverlapAppliesEveryPushOnce(t *testing.T) {
	for _, staleness := range []int64{0, 3} {
		t.Run(fmt.Sprintf("max_staleness=%d", staleness), func(t *testing.T) {
			counter, pushes := &stepCounter{}, &pushCounter{}
			cfg := Config{
				Config:     lifecycle.Config{MaxStaleness: staleness, Optimizer: optim.Config{Name: "ftrl", LearningRate: 0.1}, Observer: counter, WaitLogEvery: 100 * time.Millisecond},
				Model:      "sparse_lr",
				Overlap:    OverlapOn,
				TrainSteps: 60,
				ResultFile: filepath.Join(t.TempDir(), "result.json"),
			}
			cfg.Data.TrainData = writeLibSVM(t, t.TempDir(), "train.svm", 101)
			cfg.Data.BatchSize, cfg.Data.Seed, cfg.Data.InputFormat = 10, 1, "libsvm"
			if !overlaps(cfg, 2) {
				t.Fatalf("overlaps(%+v, 2 workers) = false", cfg)
			}
			tc := newTestCluster(t, 1, 2, cfg)
			tc.psSet = func(p *PSConfig) { p.PSObserver = pushes }
			p := tc.startPS(0)
			for i, err := range tc.runWorkers(withDeadline(t, time.Minute)) {
				if err != nil {
					t.Fatalf("worker %d: %v", i, err)
				}
			}
			select {
			case <-p.done:
				if p.err != nil {
					t.Fatalf("ps: %v", p.err)
				}
			case <-withDeadline(t, 30*time.Second).Done():
				t.Fatal("the ps did not exit within 30s of its workers' end")
			}
			r := readResultFile(t, cfg.ResultFile)
			local := counter.of(0) + counter.of(1)
			applied, stale, past := pushes.of("apply"), pushes.of("drop-stale"), pushes.of("drop-past-goal")
			if int64(applied+stale+past) != local {
				t.Errorf("the ps applied %d pushes and dropped %d as stale and %d past the goal; the workers landed %d steps (%d + %d): want applied+dropped = landed",
					applied, stale, past, local, counter.of(0), counter.of(1))
			}
			// The ps drops the pushes past the goal (the goal step of the
			// chief's Init): the other worker's push in flight at the goal
			// is not applied, and the result is of the goal step.
			if int64(applied) != cfg.TrainSteps || r.GlobalStep != cfg.TrainSteps {
				t.Errorf("%d pushes applied, global step %d in the result: want %d", applied, r.GlobalStep, cfg.TrainSteps)
			}
			if staleness == 0 && stale != 0 {
				t.Errorf("%d pushes dropped as stale without --max_staleness", stale)
			}
		})
	}
}

// With --epochs and the overlap, each worker pushes every batch of its
// part exactly once, the last one included: parts of 51 and 50 rows in
// batches of 10 make 6 and 5 pushes, global step 11.
func TestSparseOverlapPushesEveryBatchOfTheData(t *testing.T) {
	pushes := &pushCounter{}
	cfg := Config{Overlap: OverlapOn}
	cfg.Data.TrainData = writeLibSVM(t, t.TempDir(), "train.svm", 101)
	r, local, log := epochsJob(t, cfg, func(p *PSConfig) { p.PSObserver = pushes })
	if local != [2]int64{6, 5} || r.LocalSteps != 6 || r.GlobalStep != 11 || pushes.of("apply") != 11 {
		t.Fatalf("local steps %v (chief's result: %d), global step %d, %d pushes applied: want [6 5], 6, 11, 11", local, r.LocalSteps, r.GlobalStep, pushes.of("apply"))
	}
	if n := log.count("end of data after 1 epochs"); n != 2 {
		t.Fatalf("%d lines say the data ended, want one of each worker", n)
	}
}

// sparse_lr on a9a, FTRL, one worker: with the overlap (its default) it
// reaches the accuracy and log loss of the same steps without it, within
// the spread of seeds. Not under -short (it loads a9a twice per seed).
func TestSparseOverlapKeepsA9AQuality(t *testing.T) {
	if testing.Short() {
		t.Skip("a9a quality run: not under -short")
	}
	dir := testutil.DataDir(t, "a9a/a9a")
	var on, off []Result
	for seed := range int64(3) {
		for _, o := range []Overlap{OverlapOn, OverlapOff} {
			cfg := Config{
				Config:          lifecycle.Config{Optimizer: optim.Config{Name: "ftrl", LearningRate: 0.2}},
				Model:           "sparse_lr",
				Overlap:         o,
				TrainSteps:      1000,
				StepsToValidate: 1 << 40,
				Data:            model.Config{BatchSize: 100, Seed: 1 + seed, DataDir: dir, TrainData: "a9a/a9a", TestData: "a9a/a9a.t", InputFormat: "libsvm", NumFeatures: 123},
			}
			r := runOneWorker(t, cfg)
			if r.GlobalStep != cfg.TrainSteps || r.LocalSteps != cfg.TrainSteps {
				t.Fatalf("overlap %v: global step %d after %d local steps, want %d each", o, r.GlobalStep, r.LocalSteps, cfg.TrainSteps)
			}
			if o == OverlapOn {
				on = append(on, r)
			} else {
				off = append(off, r)
			}
		}
	}
	for i := range on {
		a, b := on[i], off[i]
		t.Logf("seed %d: overlap: accuracy %.4f log loss %.4f AUC %.4f (compute %.2fs, push/pull %.2fs); without: %.4f %.4f %.4f (%.2fs, %.2fs)",
			i+1, *a.TestAccuracy, *a.TestLogLoss, *a.TestAUC, a.ComputeS, a.PushPullS, *b.TestAccuracy, *b.TestLogLoss, *b.TestAUC, b.ComputeS, b.PushPullS)
		if *a.TestAccuracy < *b.TestAccuracy-0.003 || *a.TestLogLoss > *b.TestLogLoss+0.002 || *a.TestAUC < *b.TestAUC-0.002 {
			t.Errorf("seed %d: with the overlap accuracy %.4f, log loss %.4f, AUC %.4f; without %.4f, %.4f, %.4f: want within 0.003, 0.002, 0.002",
				i+1, *a.TestAccuracy, *a.TestLogLoss, *a.TestAUC, *b.TestAccuracy, *b.TestLogLoss, *b.TestAUC)
		}
		if a.ComputeS <= 0 || a.PushPullS <= 0 {
			t.Errorf("seed %d: result file's compute_s %v, push_pull_s %v: want both counted", i+1, a.ComputeS, a.PushPullS)
		}
	}
}

// A ps killed while the chief saves, and restarted, is recovered from
// with the overlap as without: the worker's call in flight fails, the
// worker waits for the ps, rolls back to the last checkpoint and trains
// on to the goal.
func TestSparseOverlapRecoversFromAKilledPS(t *testing.T) {
	dir := t.TempDir()
	var recoveries atomic.Int64
	cfg := Config{
		Config:     lifecycle.Config{Optimizer: optim.Config{Name: "ftrl", LearningRate: 0.1}, CheckpointDir: filepath.Join(dir, "ckpt"), SaveSteps: 100, Observer: recoveryCounter{n: &recoveries}, WaitLogEvery: 100 * time.Millisecond, RecoveryTimeout: time.Minute, StartupTimeout: time.Minute},
		Model:      "sparse_lr",
		TrainSteps: 300,
		ResultFile: filepath.Join(dir, "r.json"),
	}
	cfg.Data.TrainData = writeLibSVM(t, dir, "train.svm", 101)
	cfg.Data.BatchSize, cfg.Data.Seed, cfg.Data.InputFormat = 10, 1, "libsvm"
	if !overlaps(cfg, 1) {
		t.Fatal("one asynchronous worker does not overlap by default")
	}
	cl := newTestCluster(t, 1, 1, cfg)
	runKillingPSAtSave(t, cl, 100)
	r := readResultFile(t, cfg.ResultFile)
	if r.GlobalStep != cfg.TrainSteps || recoveries.Load() == 0 || r.Metrics["train_auc"] < 0.6 {
		t.Fatalf("global step %d after %d recoveries, train AUC %v; want %d, at least 1, >= 0.6", r.GlobalStep, recoveries.Load(), r.Metrics["train_auc"], cfg.TrainSteps)
	}
}

// countedModel is a sparse model of n batches, batch i touching key i+1,
// that counts the computes of each batch.
type countedModel struct {
	aheadModel
	counts []int
}

func (m *countedModel) SparseGradients(params, grads model.Params, rows, rowGrads [][]float32) (float64, error) {
	return m.count(m.read-1, rowGrads)
}

func (m *countedModel) PrevSparseGradients(params, grads model.Params, rows, rowGrads [][]float32) (float64, error) {
	return m.count(m.read-2, rowGrads)
}

func (m *countedModel) count(i int, rowGrads [][]float32) (float64, error) {
	m.counts[i]++
	for j := range rowGrads[0] {
		rowGrads[0][j] = 1
	}
	return 0, nil
}

// A ps killed during a job that trains its data once (--epochs) costs at
// most one batch, the one whose push it was sent: killed as the checkpoint
// of step 100 starts, the next call fails, the worker's loop ends with that error,
// and after the recovery it pushes what it had computed and not sent and
// trains the batches it had read ahead before it reads more. Over both
// lives of the ps every batch is computed once and its push applied once
// but that one, with and without the overlap.
func TestSparseLoopsPushEveryBatchAcrossAKilledPS(t *testing.T) {
	const n = 160
	for _, overlap := range []Overlap{OverlapOn, OverlapOff} {
		t.Run(fmt.Sprintf("overlap=%v", overlap == OverlapOn), func(t *testing.T) {
			dir := t.TempDir()
			var recoveries atomic.Int64
			pushes := &pushCounter{}
			m := &countedModel{aheadModel: aheadModel{n: n}, counts: make([]int, n)}
			cfg := Config{
				Config:     lifecycle.Config{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, CheckpointDir: filepath.Join(dir, "ckpt"), SaveSteps: 100, Observer: recoveryCounter{n: &recoveries}, WaitLogEvery: 100 * time.Millisecond, RecoveryTimeout: time.Minute, StartupTimeout: time.Minute},
				Model:      "counted",
				TrainSteps: 1 << 20,
				Overlap:    overlap,
				Data:       model.Config{Epochs: 1},
				NewModel:   func(model.Config) (model.Model, error) { return m, nil },
			}
			cl := newTestCluster(t, 1, 1, cfg)
			cl.psSet = func(p *PSConfig) { p.PSObserver = pushes }
			runKillingPSAtSave(t, cl, 100)
			if recoveries.Load() != 1 {
				t.Errorf("%d recoveries, want 1", recoveries.Load())
			}
			for i, c := range m.counts {
				if c != 1 {
					t.Errorf("batch %d computed %d times, want once", i, c)
				}
			}
			// The chief saves in the background (asynchronous training):
			// the kill may come while a push is on its way (that batch is
			// lost) or between two (none is). Never more than one lost,
			// never one applied twice.
			if got := pushes.of("apply"); got != n-1 && got != n {
				t.Errorf("%d pushes applied over both lives of the ps, want %d or %d (one per batch but at most the one sent to the killed ps)", got, n-1, n)
			}
		})
	}
}

// runKillingPSAtSave starts ps 0 of cl, runs its one worker (within two
// minutes) and kills the ps at the checkpoint of step, restarting it 200
// ms later; it fails t if the worker fails or the ps was never killed.
func runKillingPSAtSave(t *testing.T, cl *testCluster, step int64) {
	t.Helper()
	var once sync.Once
	struck := make(chan struct{})
	testHook = func(event string, s int64) {
		if event != "save" || s != step {
			return
		}
		once.Do(func() {
			cl.kill(0)
			go func() {
				time.Sleep(200 * time.Millisecond)
				cl.startPS(0)
			}()
			close(struck)
		})
	}
	t.Cleanup(func() { testHook = func(string, int64) {} })
	cl.startPS(0)
	if err := cl.runWorkers(withDeadline(t, 2*time.Minute))[0]; err != nil {
		t.Fatalf("worker: %v", err)
	}
	select {
	case <-struck:
	default:
		t.Fatalf("the ps was never killed at the checkpoint of step %d", step)
	}
}
