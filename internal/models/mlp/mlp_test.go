package mlp

import (
	"errors"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/data/mnist"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/testutil"
)

// TestComputeGradientsWholeSet draws one batch as large as the training set,
// so that its loss and gradients are those of the whole set whatever the
// shuffle, and checks them against Loss and the float64 path.
func TestComputeGradientsWholeSet(t *testing.T) {
	data := synthetic(1)
	n := data.Train.Len()
	m, err := NewWithData(model.Config{BatchSize: n, HiddenUnits: 8, Seed: 3}, data)
	if err != nil {
		t.Fatal(err)
	}
	params := m.Init(5)
	grads := model.NewParams(m.Variables())
	for _, g := range grads {
		for i := range g {
			g[i] = 99 // stale values must be overwritten
		}
	}
	loss, err := m.ComputeGradients(params, grads)
	if err != nil {
		t.Fatal(err)
	}
	ce, _, err := Loss(params, data.Train.Images, data.Train.Labels)
	if err != nil {
		t.Fatal(err)
	}
	// The same sums in another order of the examples: equal to float32
	// rounding.
	if math.Abs(loss-ce) > 1e-6*ce {
		t.Errorf("ComputeGradients loss %v, Loss %v", loss, ce)
	}
	// In order, in the float64 code the model used before float32.
	w, g := newWeights64(8), newWeights64(8)
	if err := w.load(params); err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace64(n, 8)
	for j, v := range data.Train.Images {
		ws.x[j] = float64(v)
	}
	ws.lossGrad(w, data.Train.Labels, n, g)
	for v, name := range []string{HidW, HidB, SmW, SmB} {
		var top float64
		for _, x := range g.slices()[v] {
			top = max(top, math.Abs(x))
		}
		for i, want := range g.slices()[v] {
			if got := float64(grads[name][i]); math.Abs(got-want) > 1e-5*top {
				t.Fatalf("%s[%d] = %v, float64 %v (largest %v)", name, i, got, want, top)
			}
		}
	}
}

func TestComputeGradientsAllocations(t *testing.T) {
	m, err := NewWithData(model.Config{BatchSize: 50, HiddenUnits: 100}, synthetic(2))
	if err != nil {
		t.Fatal(err)
	}
	params := m.Init(1)
	grads := model.NewParams(m.Variables())
	step := func() {
		if _, err := m.ComputeGradients(params, grads); err != nil {
			t.Fatal(err)
		}
	}
	step()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const steps = 20
	for range steps {
		step()
	}
	runtime.ReadMemStats(&after)
	// The buffers alone (x, activations) are over 200 kB. The matrix
	// multiply runs on the calling goroutine (gonum's Dgemm spreading a
	// product over goroutines allocated about 6 kB a step).
	perStep := (after.TotalAlloc - before.TotalAlloc) / steps
	t.Logf("%d bytes, %.0f allocations per step", perStep, float64(after.Mallocs-before.Mallocs)/steps)
	if perStep > 1<<10 {
		t.Errorf("ComputeGradients allocates %d bytes a step; its buffers should be reused", perStep)
	}
}

func TestBadParams(t *testing.T) {
	m, err := NewWithData(model.Config{HiddenUnits: 4, BatchSize: 3}, synthetic(3))
	if err != nil {
		t.Fatal(err)
	}
	good := func() (model.Params, model.Params) { return m.Init(1), model.NewParams(m.Variables()) }

	p, g := good()
	delete(p, SmB)
	if _, err := m.ComputeGradients(p, g); !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), "sm_b missing") {
		t.Errorf("missing variable: err = %v", err)
	}
	p, g = good()
	p[HidW] = p[HidW][:10]
	if _, err := m.ComputeGradients(p, g); !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), "hid_w has 10 values, want 3136 (shape [784 4])") {
		t.Errorf("short variable: err = %v", err)
	}
	p, g = good()
	g[SmW] = nil
	if _, err := m.ComputeGradients(p, g); !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), "gradient of sm_w") {
		t.Errorf("short gradient: err = %v", err)
	}
	p, _ = good()
	if _, err := m.Evaluate(model.Params{HidW: p[HidW]}); !errors.Is(err, ErrParams) {
		t.Errorf("Evaluate, missing variables: err = %v", err)
	}
	if _, _, err := Loss(p, make([]float32, 784), []uint8{1, 2}); err == nil {
		t.Error("Loss with 1 image for 2 labels: no error")
	}
	if _, _, err := Loss(p, make([]float32, 784), []uint8{10}); err == nil {
		t.Error("Loss with label 10: no error")
	}
}

func TestConfig(t *testing.T) {
	data := synthetic(4)
	for _, cfg := range []model.Config{
		{Worker: 2, NumWorkers: 2},
		{Worker: -1, NumWorkers: 2},
		{BatchSize: -1},
		{HiddenUnits: -5},
	} {
		if _, err := NewWithData(cfg, data); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
	m, err := NewWithData(model.Config{}, data)
	if err != nil {
		t.Fatal(err)
	}
	if vs := m.Variables(); vs[0].Size() != 784*DefaultHiddenUnits || vs[3].Size() != 10 {
		t.Errorf("default variables %v", vs)
	}
	if len(m.labels) != DefaultBatchSize {
		t.Errorf("default batch %d", len(m.labels))
	}
	if _, err := New(model.Config{Dataset: "cifar10", DataDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "want mnist or fashion-mnist") {
		t.Errorf("unknown dataset: err = %v", err)
	}
	if _, err := New(model.Config{DataDir: t.TempDir()}); !errors.Is(err, mnist.ErrNotFound) || !strings.Contains(err.Error(), "--data_dir") {
		t.Errorf("empty data dir: err = %v", err)
	}
}

func TestProgressAndEvaluate(t *testing.T) {
	m, err := NewWithData(model.Config{Worker: 1, NumWorkers: 3, HiddenUnits: 6}, synthetic(5))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Progress(100, 187, nil, 0.5), "Worker 1: training step 100 done (global step: 187), loss 0.5000"; got != want {
		t.Errorf("Progress = %q, want %q", got, want)
	}
	metrics, err := m.Evaluate(m.Init(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"val_cross_entropy", "val_accuracy", "test_cross_entropy", "test_accuracy"} {
		v, ok := metrics[k]
		if !ok || math.IsNaN(v) || v < 0 {
			t.Errorf("%s = %v, %v", k, v, ok)
		}
	}
	// Validate is the validation half of Evaluate, the test set untouched.
	val, err := m.Validate(m.Init(1))
	if err != nil || len(val) != 2 || val["val_accuracy"] != metrics["val_accuracy"] || val["val_cross_entropy"] != metrics["val_cross_entropy"] {
		t.Errorf("Validate = %v, %v; want Evaluate's val_accuracy and val_cross_entropy %v", val, err, metrics)
	}
	// At the initial weights the output is near uniform: loss near ln 10.
	if ce := metrics["test_cross_entropy"]; math.Abs(ce-math.Log(10)) > 0.5 {
		t.Errorf("initial test cross-entropy %v, want about %v", ce, math.Log(10))
	}
	ce, acc, err := Loss(m.Init(1), m.Data().Test.Images, m.Data().Test.Labels)
	if err != nil || ce != metrics["test_cross_entropy"] || acc != metrics["test_accuracy"] {
		t.Errorf("Loss = %v, %v, %v; Evaluate said %v, %v", ce, acc, err, metrics["test_cross_entropy"], metrics["test_accuracy"])
	}
}

// TestNewFashion loads Fashion-MNIST with DataDir naming the parent folder
// (TestTrainMNIST names the folder of the files itself).
func TestNewFashion(t *testing.T) {
	if testing.Short() {
		t.Skip("loads Fashion-MNIST")
	}
	root := testutil.DataDir(t, "fashion-mnist")
	m, err := New(model.Config{DataDir: root, Dataset: "fashion-mnist", HiddenUnits: 10, Worker: 3, NumWorkers: 4})
	if err != nil {
		t.Fatal(err)
	}
	d := m.Data()
	if d.Train.Len() != mnist.TrainSize || d.Validation.Len() != mnist.ValidationSize || d.Test.Len() != mnist.TestSize {
		t.Errorf("sizes %d/%d/%d", d.Train.Len(), d.Validation.Len(), d.Test.Len())
	}
	if n := m.batches.Set().Len(); n != mnist.TrainSize/4 {
		t.Errorf("worker 3 of 4 trains on %d examples, want %d", n, mnist.TrainSize/4)
	}
	if _, err := m.ComputeGradients(m.Init(1), model.NewParams(m.Variables())); err != nil {
		t.Fatal(err)
	}
}

// adam is the Adam update, written here so the test stands alone.
type adam struct {
	lr, b1, b2, eps float64
	t               int
	m, v            model.Params
}

func (a *adam) step(params, grads model.Params) {
	a.t++
	c1 := 1 - math.Pow(a.b1, float64(a.t))
	c2 := 1 - math.Pow(a.b2, float64(a.t))
	for name, p := range params {
		g, m, v := grads[name], a.m[name], a.v[name]
		for i := range p {
			gi := float64(g[i])
			m[i] = float32(a.b1*float64(m[i]) + (1-a.b1)*gi)
			v[i] = float32(a.b2*float64(v[i]) + (1-a.b2)*gi*gi)
			p[i] -= float32(a.lr * (float64(m[i]) / c1) / (math.Sqrt(float64(v[i])/c2) + a.eps))
		}
	}
}

// TestTrainMNIST is the single-process baseline: one worker, Adam at the
// example's learning rate of 0.01, batches of 100, 300 steps.
func TestTrainMNIST(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on real MNIST")
	}
	dir := filepath.Join(testutil.DataDir(t, "mnist"), "mnist")
	m, err := New(model.Config{DataDir: dir, Dataset: "mnist", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	params := m.Init(1)
	grads := model.NewParams(m.Variables())
	opt := &adam{lr: 0.01, b1: 0.9, b2: 0.999, eps: 1e-8,
		m: model.NewParams(m.Variables()), v: model.NewParams(m.Variables())}
	const steps = 300
	var first, last float64
	for i := range steps {
		loss, err := m.ComputeGradients(params, grads)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = loss
		}
		last = loss
		opt.step(params, grads)
	}
	metrics, err := m.Evaluate(params)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("batch loss %.3f -> %.3f; %v", first, last, metrics)
	if acc := metrics["test_accuracy"]; acc < 0.90 {
		t.Errorf("test accuracy %.4f after %d steps, want at least 0.90", acc, steps)
	}
	if acc := metrics["val_accuracy"]; acc < 0.90 {
		t.Errorf("validation accuracy %.4f after %d steps, want at least 0.90", acc, steps)
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkComputeGradients times one step's compute of the MNIST MLP,
// batch 100: in the same units as scripts/bench/torch_mnist_step.py's
// compute, the yardstick.
func BenchmarkComputeGradients(b *testing.B) {
	root := testutil.DataDir(b, "mnist")
	m, err := New(model.Config{DataDir: root, BatchSize: 100, HiddenUnits: 100})
	if err != nil {
		b.Fatal(err)
	}
	params := m.Init(1)
	grads := model.NewParams(m.Variables())
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for b.Loop() {
		if _, err := m.ComputeGradients(params, grads); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "examples/s")
	// The process's CPU time, which a busy machine moves less than the
	// wall clock (compare at GOMAXPROCS=1 with a one-thread PyTorch).
	b.ReportMetric((cpuTime(b)-cpu0).Seconds()*1000/float64(b.N), "cpu-ms/op")
	b.Logf("matrix multiply: %s", BLAS)
}
