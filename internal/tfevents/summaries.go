package tfevents

import (
	"math"
	"sync"
	"time"

	"github.com/paramserv/paramserv/internal/lifecycle"
)

// Summaries writes the chief's scalar summaries: it implements
// lifecycle.Observer. Every Every global steps (when the global step reaches
// a multiple of Every) it writes the latest loss, the global steps and
// examples per second since the previous summary, the chief's pushes
// dropped so far and, with Rate, the learning rate; at the end, the final evaluation's metrics (as
// "eval/NAME"). A write that fails is logged once; training goes on.
type Summaries struct {
	W     *Writer
	Every int64
	// ExamplesPerStep is the examples one global step takes: the batch
	// size, times the gradients aggregated per step in synchronous mode.
	// 0: examples/sec counts the steps' StepStats.Examples instead (a
	// program's own loop, whose batches this side does not know), and is
	// not written while they are 0. A NaN StepStats.Loss (none reported)
	// writes no loss.
	ExamplesPerStep int
	Logf            func(string, ...any)
	// Rate, if set, gives the job's learning rate at a global step (its
	// schedule's); it is summarised as "learning_rate".
	Rate func(step int64) float64
	// Now is the clock (time.Now if nil).
	Now func() time.Time

	mu       sync.Mutex
	started  bool
	bucket   int64 // GlobalStep / Every at the last summary
	lastStep int64
	lastTime time.Time
	dropped  int64
	examples int64 // StepStats.Examples since the last summary
	failed   bool
}

var _ lifecycle.Observer = (*Summaries)(nil)

func (s *Summaries) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Step implements lifecycle.Observer.
func (s *Summaries) Step(st lifecycle.StepStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.Dropped {
		s.dropped++
	}
	s.examples += int64(st.Examples)
	now := s.now()
	b := st.GlobalStep / max(s.Every, 1)
	if !s.started {
		// The first step of this chief (a fresh job or a restart): the
		// rates start here.
		s.started, s.bucket, s.lastStep, s.lastTime, s.examples = true, b, st.GlobalStep, now, 0
		return
	}
	if b == s.bucket {
		return
	}
	vals := map[string]float64{"dropped_pushes": float64(s.dropped)}
	if !math.IsNaN(st.Loss) {
		vals["loss"] = st.Loss
	}
	if s.Rate != nil {
		vals["learning_rate"] = s.Rate(st.GlobalStep)
	}
	if dt := now.Sub(s.lastTime).Seconds(); dt > 0 && st.GlobalStep > s.lastStep {
		rate := float64(st.GlobalStep-s.lastStep) / dt
		vals["global_step/sec"] = rate
		switch {
		case s.ExamplesPerStep > 0:
			vals["examples/sec"] = rate * float64(s.ExamplesPerStep)
		case s.examples > 0:
			vals["examples/sec"] = float64(s.examples) / dt
		}
	}
	s.write(st.GlobalStep, now, vals)
	s.bucket, s.lastStep, s.lastTime, s.examples = b, st.GlobalStep, now, 0
}

func (s *Summaries) write(step int64, now time.Time, vals map[string]float64) {
	if s.failed {
		return
	}
	if err := s.W.Scalars(step, now, vals); err != nil {
		s.failed = true
		if s.Logf != nil {
			s.Logf("summaries: %v; no more summaries are written", err)
		}
	}
}

// CheckpointSaved implements lifecycle.Observer.
func (s *Summaries) CheckpointSaved(int64, int64, time.Duration, error) {}

// Recovery implements lifecycle.Observer: the rates start again after it.
func (s *Summaries) Recovery(error) {
	s.mu.Lock()
	s.started = false
	s.mu.Unlock()
}

// Validated implements lifecycle.Observer: the metrics as
// "validation/NAME" at step.
func (s *Summaries) Validated(step int64, metrics map[string]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vals := make(map[string]float64, len(metrics))
	for k, v := range metrics {
		vals["validation/"+k] = v
	}
	if len(vals) > 0 {
		s.write(step, s.now(), vals)
	}
}

// Final implements lifecycle.Observer.
func (s *Summaries) Final(step int64, metrics map[string]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vals := make(map[string]float64, len(metrics))
	for k, v := range metrics {
		vals["eval/"+k] = v
	}
	if len(vals) > 0 {
		s.write(step, s.now(), vals)
	}
}
