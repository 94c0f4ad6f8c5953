// Package consistency decides, for one parameter-server shard, which pushed
// gradients count and when a step completes. It is the deterministic core of
// synchronous, asynchronous and bounded-staleness training: a Tracker takes
// pushes (worker, step) and returns verdicts; it holds no goroutines, sockets
// or clocks. The server applies the verdicts.
//
// Synchronous mode follows TensorFlow's SyncReplicasOptimizer: a gradient
// computed against global step t counts toward step t when it arrives while
// the shard is at step t; once ReplicasToAggregate distinct workers have
// contributed, the step completes (the caller applies the average) and the
// shard moves to t+1. A gradient for an older step is stale and dropped; a
// second gradient from the same worker for the same step is a duplicate
// (a retried push) and dropped. With fewer replicas to aggregate than
// workers, the extra (slowest) workers' gradients are the stale ones.
//
// Asynchronous mode applies every push at once and advances the step by one
// per push. With MaxStaleness > 0 (bounded staleness), a push computed more
// than MaxStaleness steps ago is dropped as stale. A push may claim a step
// ahead of the shard's own (with several shards each counts its own pushes,
// and a worker sends every shard the step it last read from the first), but
// not more than MaxAsyncLead ahead: such a step is no step any shard of the
// job reached, and would count as fresh to every staleness check.
//
// A Tracker is not safe for concurrent use; the server serialises calls.
package consistency

import (
	"fmt"
)

// Config sets the mode.
type Config struct {
	Sync                bool
	ReplicasToAggregate int   // sync: gradients averaged per step (1..NumWorkers)
	NumWorkers          int   // workers in the cluster
	MaxStaleness        int64 // async: 0 = unbounded
}

// MaxAsyncLead is how far past the shard's step an asynchronous push's
// step may be (2^40: more updates than any job makes, so a lead between
// shards that a restart or a skewed placement opens never reaches it, while
// a step such as 2^62 is refused).
const MaxAsyncLead = int64(1) << 40

// Validate reports a configuration that can never make progress.
func (c Config) Validate() error {
	if c.NumWorkers < 1 {
		return fmt.Errorf("consistency: need at least one worker, got %d", c.NumWorkers)
	}
	if c.Sync && (c.ReplicasToAggregate < 1 || c.ReplicasToAggregate > c.NumWorkers) {
		return fmt.Errorf("consistency: replicas_to_aggregate must be in 1..%d (the number of workers), got %d", c.NumWorkers, c.ReplicasToAggregate)
	}
	if c.MaxStaleness < 0 {
		return fmt.Errorf("consistency: max staleness must be >= 0, got %d", c.MaxStaleness)
	}
	return nil
}

// Verdict says what to do with one push.
type Verdict int

const (
	// Apply: async; apply the gradient now. The step has advanced by one.
	Apply Verdict = iota
	// Accumulate: sync; add the gradient to the current step's sum.
	Accumulate
	// Complete: sync; add the gradient, then apply the average of the sum
	// over ReplicasToAggregate. The step has advanced by one.
	Complete
	// DropStale: the gradient was computed against an older step.
	DropStale
	// DropDuplicate: this worker already contributed to this step.
	DropDuplicate
)

func (v Verdict) String() string {
	switch v {
	case Apply:
		return "apply"
	case Accumulate:
		return "accumulate"
	case Complete:
		return "complete"
	case DropStale:
		return "drop-stale"
	case DropDuplicate:
		return "drop-duplicate"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Dropped reports whether the push is not applied.
func (v Verdict) Dropped() bool { return v == DropStale || v == DropDuplicate }

// Stats counts verdicts since the tracker was made.
type Stats struct {
	Applied        int64 // pushes applied (async) or counted into a completed step (sync)
	StaleDropped   int64
	DuplicateDrops int64
}

// Tracker is the state of one shard. See the package doc.
type Tracker struct {
	cfg         Config
	step        int64
	contributed []bool // sync: workers counted toward the current step
	count       int    // sync: len of true entries in contributed
	stats       Stats
}

// New returns a tracker at the given step.
func New(cfg Config, step int64) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Tracker{cfg: cfg, step: step, contributed: make([]bool, cfg.NumWorkers)}, nil
}

// Step is the shard's current step: the number of updates applied.
func (t *Tracker) Step() int64 { return t.step }

// Stats returns the counters.
func (t *Tracker) Stats() Stats { return t.stats }

// Config returns the configuration.
func (t *Tracker) Config() Config { return t.cfg }

// Push decides on a gradient that worker computed against step. An error
// means the push is malformed (unknown worker, a step the shard has not
// reached) and changes nothing.
func (t *Tracker) Push(worker int, step int64) (Verdict, error) {
	if worker < 0 || worker >= t.cfg.NumWorkers {
		return 0, fmt.Errorf("consistency: worker %d out of range 0..%d", worker, t.cfg.NumWorkers-1)
	}
	if step < 0 {
		return 0, fmt.Errorf("consistency: worker %d pushed for negative step %d", worker, step)
	}
	if !t.cfg.Sync {
		if step-t.step > MaxAsyncLead {
			return 0, fmt.Errorf("consistency: worker %d pushed for step %d, more than %d steps past this shard's step %d (an asynchronous worker sends the step it last pulled)", worker, step, MaxAsyncLead, t.step)
		}
		if t.cfg.MaxStaleness > 0 && t.step-step > t.cfg.MaxStaleness {
			t.stats.StaleDropped++
			return DropStale, nil
		}
		t.step++
		t.stats.Applied++
		return Apply, nil
	}
	switch {
	case step < t.step:
		t.stats.StaleDropped++
		return DropStale, nil
	case step > t.step:
		return 0, fmt.Errorf("consistency: worker %d pushed for step %d but this shard is at step %d", worker, step, t.step)
	case t.contributed[worker]:
		t.stats.DuplicateDrops++
		return DropDuplicate, nil
	}
	t.contributed[worker] = true
	t.count++
	t.stats.Applied++
	if t.count < t.cfg.ReplicasToAggregate {
		return Accumulate, nil
	}
	clear(t.contributed)
	t.count = 0
	t.step++
	return Complete, nil
}

// Ready reports whether a pull that needs step minStep can be answered.
func (t *Tracker) Ready(minStep int64) bool { return t.step >= minStep }

// Waiting describes, for log lines, what the current sync step waits for:
// how many gradients it has, how many it needs, and which workers have not
// contributed.
func (t *Tracker) Waiting() (have, want int, missing []int) {
	if !t.cfg.Sync {
		return 0, 0, nil
	}
	for w, ok := range t.contributed {
		if !ok {
			missing = append(missing, w)
		}
	}
	return t.count, t.cfg.ReplicasToAggregate, missing
}

// SetStep moves the tracker to step, discarding a partly accumulated sync
// step (used when a shard restores a checkpoint).
func (t *Tracker) SetStep(step int64) {
	t.step = step
	clear(t.contributed)
	t.count = 0
}

// ForceComplete completes the current synchronous step with the gradients
// that have arrived (a step timeout with "proceed"), moves to the next step
// and returns how many there were (the caller averages over them). It
// returns 0 and changes nothing when none has arrived or in async mode.
func (t *Tracker) ForceComplete() int {
	if !t.cfg.Sync || t.count == 0 {
		return 0
	}
	n := t.count
	clear(t.contributed)
	t.count = 0
	t.step++
	return n
}
