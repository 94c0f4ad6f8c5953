package trainer

import "time"

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
