package telemetry

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/progress"
)

// Worker holds a worker's metrics. It implements lifecycle.Observer; Next,
// if set, is told everything too (the chief's summaries).
type Worker struct {
	Next lifecycle.Observer

	steps, examples, dropped prometheus.Counter
	globalStep, loss         prometheus.Gauge
	compute, exchange        prometheus.Histogram
	saveSeconds              prometheus.Histogram
	saveBytes, saveFailures  prometheus.Counter
	lastSaveBytes            prometheus.Gauge
	recoveries               prometheus.Counter
	final, validation        *prometheus.GaugeVec
	dataRows, dataBytes      *prometheus.CounterVec
	dataProgress             *prometheus.GaugeVec

	curve    curve
	mu       sync.Mutex
	last     lifecycle.StepStats
	droppedN int64
	started  time.Time
	loads    map[string]progress.Update // the latest update of each data's load, guarded by mu
}

var _ lifecycle.Observer = (*Worker)(nil)

// NewWorker registers a worker's metrics in reg.
func NewWorker(reg *prometheus.Registry) *Worker {
	f := factory{reg: reg, sub: "worker"}
	return &Worker{
		started:       time.Now(),
		steps:         f.counter("steps_total", "Local training steps done (gradients computed, pushed, values pulled)."),
		examples:      f.counter("examples_total", "Training examples in the batches of the local steps."),
		dropped:       f.counter("dropped_pushes_total", "This worker's pushes the ps dropped as stale or duplicate."),
		globalStep:    f.gauge("global_step", "The global step after this worker's latest step."),
		loss:          f.gauge("loss", "The training loss of this worker's latest batch."),
		compute:       f.histogram("compute_seconds", "Time to compute a batch's gradients.", latencyBuckets),
		exchange:      f.histogram("push_pull_seconds", "Time of a step's push and pull, as the worker waits for it (synchronous waits included).", latencyBuckets),
		saveSeconds:   f.histogram("checkpoint_save_seconds", "The chief: time to save a checkpoint (every ps's shard, the manifest, pruning).", checkpointBuckets),
		saveBytes:     f.counter("checkpoint_save_bytes_total", "The chief: bytes of the checkpoints saved, every shard together."),
		lastSaveBytes: f.gauge("checkpoint_last_bytes", "The chief: bytes of the latest checkpoint saved."),
		saveFailures:  f.counter("checkpoint_save_failures_total", "The chief: checkpoints that failed to save."),
		recoveries:    f.counter("recoveries_total", "Times this worker lost the ps (one died, restarted or moved on) and recovered."),
		final:         f.gaugeVec("final_metric", "The chief's final evaluation, by metric (accuracy, test_auc, ...).", "metric"),
		validation:    f.gaugeVec("validation_metric", "The chief's latest validation (every --steps_to_validate local steps), by metric (val_accuracy, ...).", "metric"),
		dataRows:      f.counterVec("data_rows_loaded_total", "Rows (examples of this worker's part) loaded from data files, as they are read, by data (training, validation, test).", "data"),
		dataBytes:     f.counterVec("data_read_bytes_total", "Bytes of data files read while loading them (before decompression), by data.", "data"),
		dataProgress:  f.gaugeVec("data_load_progress_ratio", "How far the latest load of the data has come: bytes read of the files' size, 1 once loaded.", "data"),
		loads:         map[string]progress.Update{},
	}
}

// DataLoad is told how far a load of data files has come (model.Config's
// LoadProgress).
func (w *Worker) DataLoad(data string, u progress.Update) {
	w.mu.Lock()
	prev := w.loads[data]
	if u.Bytes < prev.Bytes || u.Rows < prev.Rows || prev.Done {
		prev = progress.Update{} // a new load of the same data
	}
	w.loads[data] = u
	w.mu.Unlock()
	if d := u.Rows - prev.Rows; d > 0 {
		w.dataRows.WithLabelValues(data).Add(float64(d))
	}
	if d := u.Bytes - prev.Bytes; d > 0 {
		w.dataBytes.WithLabelValues(data).Add(float64(d))
	}
	w.dataProgress.WithLabelValues(data).Set(u.Fraction())
}

// Step implements lifecycle.Observer.
func (w *Worker) Step(s lifecycle.StepStats) {
	w.steps.Inc()
	w.examples.Add(float64(s.Examples))
	if s.Dropped {
		w.dropped.Inc()
	}
	w.globalStep.Set(float64(s.GlobalStep))
	w.loss.Set(s.Loss)
	w.compute.Observe(s.Compute.Seconds())
	w.exchange.Observe(s.Exchange.Seconds())
	w.curve.add(s.GlobalStep, s.Loss)
	w.mu.Lock()
	w.last = s
	if s.Dropped {
		w.droppedN++
	}
	w.mu.Unlock()
	if w.Next != nil {
		w.Next.Step(s)
	}
}

// CheckpointSaved implements lifecycle.Observer.
func (w *Worker) CheckpointSaved(step, bytes int64, took time.Duration, err error) {
	if err != nil {
		w.saveFailures.Inc()
	} else {
		w.saveSeconds.Observe(took.Seconds())
		w.saveBytes.Add(float64(bytes))
		w.lastSaveBytes.Set(float64(bytes))
	}
	if w.Next != nil {
		w.Next.CheckpointSaved(step, bytes, took, err)
	}
}

// Recovery implements lifecycle.Observer.
func (w *Worker) Recovery(cause error) {
	w.recoveries.Inc()
	if w.Next != nil {
		w.Next.Recovery(cause)
	}
}

// Final implements lifecycle.Observer.
func (w *Worker) Final(step int64, metrics map[string]float64) {
	for k, v := range metrics {
		w.final.WithLabelValues(k).Set(v)
	}
	if w.Next != nil {
		w.Next.Final(step, metrics)
	}
}

// Validated implements lifecycle.Observer.
func (w *Worker) Validated(step int64, metrics map[string]float64) {
	for k, v := range metrics {
		w.validation.WithLabelValues(k).Set(v)
	}
	if w.Next != nil {
		w.Next.Validated(step, metrics)
	}
}
