package trainer

import (
	"testing"

	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/testutil"
)

// A worker pulling its rows incrementally (--incremental_pull) trains bit
// for bit as standalone does: the rows it reads are those of a full pull.
// FTRL with L1 leaves many weights at 0, so many rows are not sent.
func TestIncrementalPullTrainsAsStandalone(t *testing.T) {
	cfg := Config{
		Config:     lifecycle.Config{Optimizer: optim.Config{Name: "ftrl", LearningRate: 0.2, L1: 1}},
		Model:      "sparse_lr",
		Data:       model.Config{BatchSize: 50, Seed: 3, TrainData: "a9a/a9a", TestData: "a9a/a9a.t", InputFormat: "libsvm", NumFeatures: 123},
		TrainSteps: 100,
		Overlap:    OverlapOff,
	}
	cfg.Data.DataDir = testutil.DataDir(t, "a9a/a9a")
	want := runStandalone(t, cfg)
	cfg.IncrementalPull = true
	got := runOneWorker(t, cfg)
	if got.GlobalStep != want.GlobalStep || len(got.Metrics) == 0 || len(got.Metrics) != len(want.Metrics) {
		t.Fatalf("incremental pulls: step %d, metrics %v; standalone: step %d, metrics %v", got.GlobalStep, got.Metrics, want.GlobalStep, want.Metrics)
	}
	for k, v := range want.Metrics {
		if got.Metrics[k] != v {
			t.Errorf("metric %s: with incremental pulls %v, standalone %v (want bit for bit equal)", k, got.Metrics[k], v)
		}
	}
}
