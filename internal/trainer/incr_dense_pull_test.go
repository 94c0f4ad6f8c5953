package trainer

import (
	"testing"

	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/testutil"
)

// MNIST, whose variables are all dense, trains with incremental pulls
// (incremental and, once the worker backs off, full ones) to the same
// metrics bit for bit as with full pulls. Two MNIST runs take 15 s under
// -race: not with -short (internal/client's randomised test checks every
// pull bit for bit there).
func TestIncrementalDensePullTrainsAsFullPulls(t *testing.T) {
	if testing.Short() {
		t.Skip("two MNIST runs: not with -short")
	}
	dir := testutil.DataDir(t, "mnist")
	cfg := Config{
		Config:     lifecycle.Config{Optimizer: optim.Config{Name: "sgd", LearningRate: 0.1}, Sync: true},
		Model:      "mnist",
		Data:       model.Config{BatchSize: 100, Seed: 3, DataDir: dir, Dataset: "mnist"},
		TrainSteps: 20,
	}
	want := runOneWorker(t, cfg)
	cfg.IncrementalPull = true
	got := runOneWorker(t, cfg)
	if got.GlobalStep != want.GlobalStep || len(got.Metrics) == 0 || len(got.Metrics) != len(want.Metrics) {
		t.Fatalf("incremental pulls: step %d, metrics %v; full pulls: step %d, metrics %v", got.GlobalStep, got.Metrics, want.GlobalStep, want.Metrics)
	}
	for k, v := range want.Metrics {
		if got.Metrics[k] != v {
			t.Errorf("metric %s: with incremental pulls %v, with full pulls %v (want bit for bit equal)", k, got.Metrics[k], v)
		}
	}
}
