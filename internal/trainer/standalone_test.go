package trainer

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/catalog"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/data/synth"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/testutil"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// runStandalone trains cfg with RunStandalone and returns its result file.
func runStandalone(t *testing.T, cfg Config) Result {
	t.Helper()
	cfg.ResultFile = filepath.Join(t.TempDir(), "standalone.json")
	if err := RunStandalone(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return readResultFile(t, cfg.ResultFile)
}

// Standalone runs the same loop and the same update code as a cluster: a
// one-worker cluster that does not overlap its steps (so its order of
// arithmetic is the standalone one's) ends bit for bit where standalone
// does, in both modes, dense and sparse.
func TestStandaloneEqualsOneWorkerCluster(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"linreg-async-adam", Config{
			Config:     lifecycle.Config{Optimizer: optim.Config{Name: "adam", LearningRate: 0.05}},
			Model:      "linreg",
			Data:       model.Config{BatchSize: 10, Seed: 7},
			TrainSteps: 150,
		}},
		{"linreg-sync-sgd", Config{
			Config:     lifecycle.Config{Optimizer: optim.Config{Name: "sgd", LearningRate: 0.05}, Sync: true},
			Model:      "linreg",
			Data:       model.Config{BatchSize: 10, Seed: 7},
			TrainSteps: 150,
		}},
		{"sparse_lr-async-ftrl", Config{
			Config:     lifecycle.Config{Optimizer: optim.Config{Name: "ftrl", LearningRate: 0.2}},
			Model:      "sparse_lr",
			Data:       model.Config{BatchSize: 50, Seed: 3, TrainData: "a9a/a9a", TestData: "a9a/a9a.t", InputFormat: "libsvm", NumFeatures: 123},
			TrainSteps: 100,
		}},
		// Standalone draws a batch ahead while its table works
		// (sparsePipeLoop): here up to the end of the data, the last
		// batch a short one.
		{"sparse_lr-async-ftrl-epochs", Config{
			Config:     lifecycle.Config{Optimizer: optim.Config{Name: "ftrl", LearningRate: 0.2}},
			Model:      "sparse_lr",
			Data:       model.Config{BatchSize: 700, Seed: 5, Epochs: 1, TrainData: "a9a/a9a", TestData: "a9a/a9a.t", InputFormat: "libsvm", NumFeatures: 123},
			TrainSteps: 1000,
		}},
		// Many keys new at every step, up to the goal (not the data's
		// end): the table's rows and statistics must match too, with no
		// row made for a batch past the one pulled last.
		{"sparse_lr-synth-ctr", Config{
			Config:     lifecycle.Config{Optimizer: optim.Config{Name: "ftrl", LearningRate: 0.2}},
			Model:      "sparse_lr",
			Data:       model.Config{BatchSize: 100, Seed: 2, InputFormat: "criteo", CatFields: 8},
			TrainSteps: 40,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Overlap = OverlapOff
			if cfg.Model == "sparse_lr" && cfg.Data.InputFormat == "criteo" {
				dir := t.TempDir()
				sc := synth.DefaultConfig()
				sc.Out, sc.Rows, sc.TestRows, sc.Fields, sc.Shards = dir, 6000, 1000, 8, 1
				if _, err := synth.Generate(context.Background(), sc); err != nil {
					t.Fatal(err)
				}
				cfg.Data.TrainData, cfg.Data.TestData = dir, filepath.Join(dir, "test.tsv")
			} else if cfg.Model == "sparse_lr" {
				cfg.Data.DataDir = testutil.DataDir(t, "a9a/a9a")
			}
			want := runOneWorker(t, cfg)
			got := runStandalone(t, cfg)
			if !got.Standalone || want.Standalone {
				t.Errorf("standalone flags in the result files: %v and %v", got.Standalone, want.Standalone)
			}
			if got.GlobalStep != want.GlobalStep || got.LocalSteps != want.LocalSteps || got.Mode != want.Mode {
				t.Errorf("standalone: step %d, %d local steps, %s; cluster: %d, %d, %s", got.GlobalStep, got.LocalSteps, got.Mode, want.GlobalStep, want.LocalSteps, want.Mode)
			}
			if len(got.Metrics) == 0 || len(got.Metrics) != len(want.Metrics) {
				t.Fatalf("metrics: standalone %v, cluster %v", got.Metrics, want.Metrics)
			}
			if !slices.Equal(got.Tables, want.Tables) {
				t.Errorf("tables: standalone %+v, cluster %+v", got.Tables, want.Tables)
			}
			for k, v := range want.Metrics {
				if got.Metrics[k] != v {
					t.Errorf("metric %s: standalone %v, cluster %v (want bit for bit equal)", k, got.Metrics[k], v)
				}
			}
			if got.ExamplesPerS <= 0 || got.ComputeS <= 0 || got.TrainingS <= 0 || got.ChiefExamplesPerS <= 0 || got.BatchSize != want.BatchSize {
				t.Errorf("standalone result lacks its timings or batch size: %+v", got)
			}
		})
	}
}

// parallelModel records what SetParallel was told.
type parallelModel struct {
	model.Model
	parallel bool
}

func (m *parallelModel) SetParallel(on bool) { m.parallel = on }

// Standalone has the machine's cores to itself: a model that can spread its
// arithmetic over them (the pure-Go MLP) is told it may.
func TestStandaloneLetsTheModelUseEveryCore(t *testing.T) {
	var pm *parallelModel
	cfg := Config{
		Config:     lifecycle.Config{Optimizer: optim.Config{Name: "sgd", LearningRate: 0.05}},
		Model:      "linreg",
		Data:       model.Config{BatchSize: 10, Seed: 7},
		TrainSteps: 5,
		NewModel: func(c model.Config) (model.Model, error) {
			m, err := catalog.New("linreg", c)
			pm = &parallelModel{Model: m}
			return pm, err
		},
	}
	runStandalone(t, cfg)
	if pm == nil || !pm.parallel {
		t.Error("RunStandalone did not call the model's SetParallel(true)")
	}
}

func TestStandaloneRefusesCheckpoints(t *testing.T) {
	err := RunStandalone(context.Background(), Config{Config: lifecycle.Config{CheckpointDir: t.TempDir()}, Model: "linreg", TrainSteps: 10})
	var ce *ConfigError
	if !asConfigError(err, &ce) {
		t.Fatalf("got %v, want a ConfigError naming --checkpoint_dir", err)
	}
}

func asConfigError(err error, ce **ConfigError) bool {
	e, ok := err.(*ConfigError)
	*ce = e
	return ok
}

func TestOverlaps(t *testing.T) {
	for _, tc := range []struct {
		cfg     Config
		workers int
		want    bool
	}{
		{Config{}, 1, true},
		{Config{}, 2, false},
		{Config{Overlap: OverlapOn}, 4, true},
		{Config{Config: lifecycle.Config{Sync: true}}, 1, false},
		{Config{Config: lifecycle.Config{Sync: true}, Overlap: OverlapOn}, 1, false},
		{Config{Overlap: OverlapOff}, 1, false},
		{Config{Config: lifecycle.Config{MaxStaleness: 1}}, 1, true},
		{Config{Config: lifecycle.Config{MaxStaleness: 2}, Overlap: OverlapOn}, 2, false},
		{Config{Config: lifecycle.Config{MaxStaleness: 3}, Overlap: OverlapOn}, 2, true},
	} {
		if got := overlaps(tc.cfg, tc.workers); got != tc.want {
			t.Errorf("overlaps(%+v, %d workers) = %v, want %v", tc.cfg, tc.workers, got, tc.want)
		}
	}
}

// stepModel is a one-variable model whose gradient is the parameter value
// it was computed at; it tells the fake ps when a compute starts.
type stepModel struct {
	computeStarted func(params, grads model.Params)
}

func (m *stepModel) Variables() []model.Variable {
	return []model.Variable{{Name: "w", Shape: []int{1}}}
}
func (m *stepModel) Init(int64) model.Params { return model.Params{"w": {0}} }
func (m *stepModel) ComputeGradients(params, grads model.Params) (float64, error) {
	m.computeStarted(params, grads)
	grads["w"][0] = params["w"][0]
	return 0, nil
}
func (m *stepModel) Progress(int64, int64, model.Params, float64) string { return "" }
func (m *stepModel) Evaluate(model.Params) (map[string]float64, error)   { return nil, nil }

// overlapPS is a fake ps whose push+pull lands only when the worker has
// started computing the next step (or, if the worker waits for it instead,
// after a while): it records which.
type overlapPS struct {
	localPS
	t         *testing.T
	mu        sync.Mutex
	step      int64
	pending   *pendingCall
	overlaps  int
	waited    int
	tags      []int64 // the step each push was tagged with
	grads     []float32
	bufErrors int
}

type pendingCall struct {
	done         chan struct{}
	once         sync.Once
	grads, pulls model.Params
}

func (p *overlapPS) Pull(_ context.Context, _ int64, params model.Params) (int64, error) {
	params["w"][0] = float32(p.step)
	return p.step, nil
}

func (p *overlapPS) PushPullAsync(_ context.Context, step int64, grads model.Params, _ int64, params model.Params) *client.Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tags = append(p.tags, step)
	p.grads = append(p.grads, grads["w"][0])
	p.step++
	params["w"][0] = float32(p.step) // the pull's parameters: the step they are at
	done := make(chan struct{})
	pc := &pendingCall{done: done, grads: grads, pulls: params}
	p.pending = pc
	time.AfterFunc(300*time.Millisecond, func() {
		pc.once.Do(func() {
			p.mu.Lock()
			p.waited++
			p.mu.Unlock()
			close(done)
		})
	})
	return &client.Call{Done: done, Step: p.step}
}

func (p *overlapPS) computeStarted(params, grads model.Params) {
	p.mu.Lock()
	pc := p.pending
	p.pending = nil
	p.mu.Unlock()
	if pc == nil {
		return
	}
	// The call in flight still reads its gradients and writes its
	// parameters: the compute must use other buffers.
	if &pc.grads["w"][0] == &grads["w"][0] || &pc.pulls["w"][0] == &params["w"][0] {
		p.mu.Lock()
		p.bufErrors++
		p.mu.Unlock()
	}
	pc.once.Do(func() {
		p.mu.Lock()
		p.overlaps++
		p.mu.Unlock()
		close(pc.done)
	})
}

func (p *overlapPS) Status(context.Context) ([]*pb.StatusResponse, error) { return nil, nil }

// In asynchronous mode the worker computes step t+1 while the push of step
// t and the pull after it are in flight, on other buffers than the call's;
// it tags each push with the step of the parameters it was computed at and
// pushes nothing past the goal.
func TestOverlapComputesWhileTheRoundTripIsInFlight(t *testing.T) {
	ps := &overlapPS{t: t}
	m := &stepModel{computeStarted: ps.computeStarted}
	cfg := Config{TrainSteps: 5, StepsToValidate: 100}
	cfg.defaults()
	var st loopStats
	params := model.NewParams(m.Variables())
	if err := denseLoop(context.Background(), cfg, ps, m, params, nil, &st, true); err != nil {
		t.Fatal(err)
	}
	if ps.bufErrors > 0 {
		t.Errorf("%d computes wrote buffers a call in flight was using", ps.bufErrors)
	}
	// Every call but the last is overlapped with the next compute (the
	// last one's next compute is after the goal... it is still computed,
	// then discarded).
	if ps.waited > 0 || ps.overlaps != 5 {
		t.Errorf("%d calls landed during the next compute, %d were waited for; want 5 and 0", ps.overlaps, ps.waited)
	}
	// Step 0 computes at the first pull (0); step 1 again at 0 (the first
	// push is in flight); then each step at the parameters one push
	// behind.
	wantTags := []int64{0, 0, 1, 2, 3}
	if len(ps.tags) != len(wantTags) {
		t.Fatalf("pushes tagged %v, want %v", ps.tags, wantTags)
	}
	for i := range wantTags {
		if ps.tags[i] != wantTags[i] || ps.grads[i] != float32(wantTags[i]) {
			t.Fatalf("pushes tagged %v with gradients %v, want both %v", ps.tags, ps.grads, wantTags)
		}
	}
	if st.step != 5 || st.local != 5 || params["w"][0] != 5 {
		t.Errorf("ended at step %d after %d local steps with w=%v in the caller's params, want 5, 5, 5", st.step, st.local, params["w"][0])
	}
}
