package trainer

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Observer is told what a worker's training loop does, for metrics and
// summaries (package telemetry implements it). Its methods run on the
// loop's goroutine between steps: they must be quick.
type Observer interface {
	// Step: one local step done (gradients computed, pushed, the new
	// values pulled).
	Step(StepStats)
	// CheckpointSaved: the chief saved (or failed to save) a checkpoint of
	// step; bytes is the size of every shard together.
	CheckpointSaved(step, bytes int64, took time.Duration, err error)
	// Recovery: the worker lost the ps (cause) and began recovering.
	Recovery(cause error)
	// Final: the chief's final evaluation at step (metrics as logged).
	Final(step int64, metrics map[string]float64)
	// Validated: the chief's validation at step, every --steps_to_validate
	// local steps (models that are a model.Validator).
	Validated(step int64, metrics map[string]float64)
}

// StepStats describes one local step of a worker.
type StepStats struct {
	Worker     int
	GlobalStep int64 // after the step
	LocalStep  int64 // this worker's steps so far
	Loss       float64
	Examples   int           // examples in the step's batch
	Compute    time.Duration // computing the gradients
	Exchange   time.Duration // the push and pull
	Dropped    bool          // the push was dropped as stale or duplicate
}

type nopObserver struct{}

func (nopObserver) Step(StepStats)                                     {}
func (nopObserver) CheckpointSaved(int64, int64, time.Duration, error) {}
func (nopObserver) Recovery(error)                                     {}
func (nopObserver) Final(int64, map[string]float64)                    {}
func (nopObserver) Validated(int64, map[string]float64)                {}

// validate scores the parameters on the model's validation data (score:
// a Validator's or a SparseValidator's call), logs the metrics and tells
// the observer. A failure is logged: training goes on. No metrics (no
// validation data) log nothing.
func validate(cfg Config, step int64, score func() (map[string]float64, error)) {
	metrics, err := score()
	if err != nil {
		cfg.Logf("worker %d: validation at global step %d failed: %v", cfg.Cluster.Task.Index, step, err)
		return
	}
	if len(metrics) == 0 {
		return
	}
	keys := make([]string, 0, len(metrics))
	for k := range metrics {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.4f", k, metrics[k])
	}
	cfg.Logf("Worker %d: validation at global step %d: %s", cfg.Cluster.Task.Index, step, strings.Join(parts, ", "))
	cfg.Observer.Validated(step, metrics)
}
