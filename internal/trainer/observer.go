package trainer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/paramserv/paramserv/internal/lifecycle"
)

// Observer is told what a worker's training loop does, for metrics and
// summaries (package telemetry implements it): lifecycle.Observer.
type Observer = lifecycle.Observer

// StepStats describes one local step of a worker.
type StepStats = lifecycle.StepStats

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
