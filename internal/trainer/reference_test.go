package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/catalog"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/local"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/testutil"
)

// A short MNIST run through a real ps is compared with an independent
// reference at the same steps and seed, not with a loose accuracy floor:
// one synchronous worker must end where Adam written out here (TF1's
// ApplyAdam, from its documentation, sharing no code with package optim)
// ends, to the last digit of the metrics. A broken
// optimizer on the ps (Adam without its bias correction, say, which a 90%
// floor let pass) moves the validation cross entropy far more than the
// rounding that separates the two formulas.
func TestMNISTMatchesAnIndependentReference(t *testing.T) {
	dir := testutil.DataDir(t, "mnist")
	const steps, lr = 60, 0.01
	data := model.Config{BatchSize: 100, Seed: 3, DataDir: dir, Dataset: "mnist"}
	r := runOneWorker(t, Config{
		Config:     lifecycle.Config{Optimizer: optim.Config{Name: "adam", LearningRate: lr}, Sync: true},
		Model:      "mnist",
		Data:       data,
		TrainSteps: steps,
	})
	if r.ValCrossEntropy == nil || r.TestAccuracy == nil {
		t.Fatalf("the result lacks the metrics: %+v", r)
	}

	// The reference: the same model, data order and initial values, and
	// Adam computed in float64 with its moments kept in float32 as the ps
	// keeps them, on this process.
	data.NumWorkers = 1
	m, err := catalog.New("mnist", data)
	if err != nil {
		t.Fatal(err)
	}
	p, g := m.Init(data.Seed), model.NewParams(m.Variables())
	mom, vel := map[string][]float32{}, map[string][]float32{}
	for _, v := range m.Variables() {
		mom[v.Name], vel[v.Name] = make([]float32, v.Size()), make([]float32, v.Size())
	}
	const b1, b2, eps = 0.9, 0.999, 1e-8
	for step := 1; step <= steps; step++ {
		if _, err := m.ComputeGradients(p, g); err != nil {
			t.Fatal(err)
		}
		for _, v := range m.Variables() {
			mm, vv, pp := mom[v.Name], vel[v.Name], p[v.Name]
			for i, gi32 := range g[v.Name] {
				gi := float64(gi32)
				mi := b1*float64(mm[i]) + (1-b1)*gi
				vi := b2*float64(vv[i]) + (1-b2)*gi*gi
				mm[i], vv[i] = float32(mi), float32(vi)
				// TF1's ApplyAdam, the rule the ps promises: the bias
				// corrections folded into the step size, epsilon outside.
				lrt := lr * math.Sqrt(1-math.Pow(b2, float64(step))) / (1 - math.Pow(b1, float64(step)))
				pp[i] = float32(float64(pp[i]) - lrt*mi/(math.Sqrt(vi)+eps))
			}
		}
	}
	want, err := m.Evaluate(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after %d steps: cluster val cross entropy %.5f, test accuracy %.4f; reference %.5f, %.4f",
		steps, *r.ValCrossEntropy, *r.TestAccuracy, want["val_cross_entropy"], want["test_accuracy"])
	// The same arithmetic in the same order: equal but for float64
	// rounding of the step size.
	if rel := math.Abs(*r.ValCrossEntropy-want["val_cross_entropy"]) / want["val_cross_entropy"]; rel > 1e-6 {
		t.Errorf("validation cross entropy %.7f, the reference's %.7f (relative difference %.2g, want < 1e-6)", *r.ValCrossEntropy, want["val_cross_entropy"], rel)
	}
	if *r.TestAccuracy != want["test_accuracy"] {
		t.Errorf("test accuracy %.4f, the reference's %.4f", *r.TestAccuracy, want["test_accuracy"])
	}
}

// runOneWorker trains cfg on a cluster of one ps and one worker, both in
// this process on loopback ports, and returns the chief's result.
func runOneWorker(t *testing.T, cfg Config) Result {
	t.Helper()
	ports, err := local.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	spec := cluster.Spec{PS: []string{fmt.Sprintf("127.0.0.1:%d", ports[0])}, Workers: []string{fmt.Sprintf("127.0.0.1:%d", ports[1])}}
	cfg.ResultFile = filepath.Join(t.TempDir(), "r.json")
	psCfg, wCfg := cfg, cfg
	psCfg.Cluster = cluster.Config{Spec: spec, Task: cluster.Task{Job: "ps", Index: 0}}
	wCfg.Cluster = cluster.Config{Spec: spec, Task: cluster.Task{Job: "worker", Index: 0}}
	psErr := make(chan error, 1)
	go func() { psErr <- RunPS(context.Background(), psOf(psCfg)) }()
	if err := RunWorker(context.Background(), wCfg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-psErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the ps did not exit within a minute of its only worker's end")
	}
	b, err := os.ReadFile(cfg.ResultFile)
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}
