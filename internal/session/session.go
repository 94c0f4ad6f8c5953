// Package session is one worker's connection to a training job's parameter
// servers, for programs that train their own model: Start waits for the ps
// and has the chief initialise them (the others wait until it has), then
// the program pulls values, pushes gradients and pulls the next values
// (PushPull), reads and updates rows of sparse tables, and says Done.
//
// It is the layer the Python binding (python/native) calls, so that
// placement, key hashing, the chief's Init, incarnations and recovery are
// this Go code's and are not written again in another language.
//
// Start-up, recovery and checkpoints are the built-in training loop's
// (trainer.Worker): the chief locks its checkpoint directory, initialises
// the ps or finds them initialised or restored, and the others wait until
// the ps hold one history; when an exchange fails because a ps went away
// or restarted, the session waits for it (the chief rolling the cluster
// back to one checkpoint), pulls the current values and goes on from the
// cluster's step, the failed step's gradients lost; the chief saves a
// checkpoint every SaveSteps and at Done.
//
// A Session is used by one goroutine at a time.
package session

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/trainer"
)

// Config is one worker's view of the job.
type Config struct {
	// Cluster is the cluster and this worker's task (read it with
	// cluster.Resolve from flags or TF_CONFIG). Task.Job must be "worker".
	Cluster cluster.Config
	// Variables are the dense variables, in order; Tables the sparse ones.
	// Every worker must declare the same.
	Variables []model.Variable
	Tables    []model.Table

	// The chief's choices for the whole cluster (the others' are ignored:
	// the ps tell them the mode).
	Optimizer           optim.Config
	Sync                bool
	ReplicasToAggregate int   // sync: 0 means every worker
	MaxStaleness        int64 // async: drop gradients older than this (0: never)

	// SplitBytes: see client.Options. Every worker must use the same.
	SplitBytes int
	// CheckpointDir, if set, is where the chief saves checkpoints, every
	// SaveSteps global steps and/or SaveEvery, and at Done, keeping the
	// last KeepCheckpoints (5 if 0); every ps must have been started with
	// the same --checkpoint_dir, which it restores from after a restart.
	CheckpointDir   string
	SaveSteps       int64
	SaveEvery       time.Duration
	KeepCheckpoints int

	// StartupTimeout bounds Start's wait for the ps (5 minutes if 0);
	// RecoveryTimeout the wait for them to come back after a failure (5
	// minutes if 0).
	StartupTimeout, RecoveryTimeout time.Duration

	// Logf receives log lines (nil discards them); WaitLogEvery is how
	// often a wait logs what it waits for (5s if 0).
	Logf         func(format string, args ...any)
	WaitLogEvery time.Duration

	// Dial, if set, replaces TCP for the connections to the ps (tests run
	// clusters over package memnet).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Session is a started worker.
type Session struct {
	cfg    Config
	c      *client.Client
	w      *trainer.Worker
	step   int64
	worker int
}

func (cfg *Config) defaults() {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.WaitLogEvery <= 0 {
		cfg.WaitLogEvery = 5 * time.Second
	}
	if cfg.StartupTimeout <= 0 {
		cfg.StartupTimeout = 5 * time.Minute
	}
	if cfg.RecoveryTimeout <= 0 {
		cfg.RecoveryTimeout = 5 * time.Minute
	}
	if cfg.ReplicasToAggregate <= 0 {
		cfg.ReplicasToAggregate = len(cfg.Cluster.Spec.Workers)
	}
}

// Start connects to every ps and waits for them. The chief (worker 0) Inits
// them with init, or finds them initialised already (after a chief restart
// or a checkpoint restore) and goes on from their step; the other workers
// pass nil and wait until the chief has initialised the ps. It gives up
// after cfg.StartupTimeout or when ctx ends.
func Start(ctx context.Context, cfg Config, init model.Params) (*Session, error) {
	cfg.defaults()
	if cfg.Cluster.Task.Job != cluster.JobWorker {
		return nil, fmt.Errorf("session: task %s: want a worker task", cfg.Cluster.Task)
	}
	numWorkers := len(cfg.Cluster.Spec.Workers)
	if cfg.Sync && cfg.ReplicasToAggregate > numWorkers {
		return nil, fmt.Errorf("session: replicas_to_aggregate=%d is more than the %d workers", cfg.ReplicasToAggregate, numWorkers)
	}
	worker := cfg.Cluster.Task.Index
	chief := cfg.Cluster.IsChief()
	if chief {
		for _, v := range cfg.Variables {
			if got := len(init[v.Name]); got != v.Size() {
				return nil, fmt.Errorf("session: chief: initial value of %q has %d elements, want %d (shape %v)", v.Name, got, v.Size(), v.Shape)
			}
		}
	}
	c, err := client.New(cfg.Cluster.Spec.PS, cfg.Variables, client.Options{
		Worker: worker, Tables: cfg.Tables, SplitBytes: cfg.SplitBytes, Logf: cfg.Logf, WaitLogEvery: cfg.WaitLogEvery, Dial: cfg.Dial,
	})
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	tcfg := trainer.Config{
		Cluster: cfg.Cluster, Optimizer: cfg.Optimizer, Sync: cfg.Sync, ReplicasToAggregate: cfg.ReplicasToAggregate,
		MaxStaleness: cfg.MaxStaleness, SplitBytes: cfg.SplitBytes, StartupTimeout: cfg.StartupTimeout,
		CheckpointDir: cfg.CheckpointDir, SaveSteps: cfg.SaveSteps, SaveEvery: cfg.SaveEvery, KeepCheckpoints: cfg.KeepCheckpoints,
		RecoveryTimeout: cfg.RecoveryTimeout, Logf: cfg.Logf, WaitLogEvery: cfg.WaitLogEvery,
	}
	if tcfg.CheckpointDir != "" && tcfg.SaveSteps <= 0 && tcfg.SaveEvery <= 0 {
		tcfg.SaveEvery = 10 * time.Minute // as --save_model_secs
	}
	w, step, err := trainer.StartWorker(ctx, tcfg, c, cfg.Variables, func() model.Params { return init })
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("session: %w", err)
	}
	s := &Session{cfg: cfg, c: c, w: w, step: step, worker: worker}
	if c.IsSync() != cfg.Sync && chief {
		cfg.Logf("worker %d: warning: the ps train %s (restored from a checkpoint); going on so", worker, modeName(c.IsSync()))
	}
	return s, nil
}

func modeName(sync bool) string {
	if sync {
		return "synchronously"
	}
	return "asynchronously"
}

// Step is the global step of the values last pulled.
func (s *Session) Step() int64 { return s.step }

// Sync reports whether the cluster trains synchronously, as the ps said.
func (s *Session) Sync() bool { return s.c.IsSync() }

// Worker is this worker's index (0 is the chief).
func (s *Session) Worker() int { return s.worker }

// NumWorkers is the number of workers of the cluster.
func (s *Session) NumWorkers() int { return len(s.cfg.Cluster.Spec.Workers) }

// Pull reads every variable into params (which holds a slice of the right
// size per variable) and returns the global step of the values read.
func (s *Session) Pull(ctx context.Context, params model.Params) (int64, error) {
	for {
		step, err := s.c.Pull(ctx, 0, params)
		if err == nil {
			s.step = step
			return step, nil
		}
		if err := s.recover(ctx, err); err != nil {
			return s.step, err
		}
	}
}

// PushPull pushes grads, computed at the session's step (the values last
// pulled), and pulls the next values into params: in sync mode, once the
// step the push takes part in has completed; in async mode at once. It
// returns the new global step. After a ps failure it recovers (the
// gradients are lost) and returns the values and step it pulled then.
func (s *Session) PushPull(ctx context.Context, grads, params model.Params) (step int64, err error) {
	return s.PushPullRows(ctx, grads, params, nil)
}

// Rows are gradients of rows of a sparse table: Values holds len(Keys)×dim
// floats, row i for Keys[i]; Keys are distinct.
type Rows struct {
	Table  string
	Keys   []uint64
	Values []float32
}

// PushPullRows is PushPull that also pushes gradients of sparse rows in the
// same request, so that they count as one push of this worker's step (a
// PushRows of its own is a push of its own: in sync mode it would take the
// worker's place in the step). Each table appears once in rowGrads.
func (s *Session) PushPullRows(ctx context.Context, grads, params model.Params, rowGrads []Rows) (step int64, err error) {
	var minStep int64
	if s.c.IsSync() {
		minStep = s.step + 1
	}
	req := &client.Request{Push: true, Step: s.step, Grads: grads, Pull: true, MinStep: minStep, Params: params}
	for i, r := range rowGrads {
		for _, prev := range rowGrads[:i] {
			if prev.Table == r.Table {
				// An asynchronous ps would apply the two as two updates.
				return s.step, fmt.Errorf("session: worker %d: table %q twice in one push: give each table once, the gradients of a key summed", s.worker, r.Table)
			}
		}
		if len(r.Keys) > 0 {
			req.SparseGrads = append(req.SparseGrads, client.Rows{Table: r.Table, Keys: r.Keys, Values: r.Values})
		}
	}
	call := s.c.Do(ctx, req)
	newStep, err := call.Step, call.Err
	if err == nil {
		s.step = newStep
		if err := s.w.Stepped(ctx, newStep); err != nil {
			return newStep, fmt.Errorf("session: worker %d: checkpoint of step %d: %w", s.worker, newStep, err)
		}
		return newStep, nil
	}
	if err := s.recover(ctx, err); err != nil {
		return s.step, fmt.Errorf("session: worker %d: push of step %d: %w", s.worker, s.step, err)
	}
	return s.Pull(ctx, params)
}

// PullRows reads the rows of keys (distinct) of table into out
// (len(keys)×dim values, row i for keys[i]).
func (s *Session) PullRows(ctx context.Context, table string, keys []uint64, out []float32) error {
	for {
		_, err := s.c.PullRows(ctx, 0, table, keys, out)
		if err == nil {
			return nil
		}
		if err := s.recover(ctx, err); err != nil {
			return err
		}
	}
}

// PushRows pushes gradients (len(keys)×dim values) for the rows of keys
// (distinct) of table, computed at the session's step, as a push of its
// own (in sync mode it takes this worker's place in the step: use
// PushPullRows to push rows along with the dense gradients). After a ps
// failure it recovers and the gradients are lost.
func (s *Session) PushRows(ctx context.Context, table string, keys []uint64, grads []float32) error {
	_, _, err := s.c.PushRows(ctx, s.step, table, keys, grads)
	if err == nil {
		return nil
	}
	return s.recover(ctx, err)
}

// Done ends this worker's training: the chief saves the final checkpoint,
// then every ps is told this worker has finished.
func (s *Session) Done(ctx context.Context) error {
	if err := s.w.Finish(ctx, s.step); err != nil {
		return fmt.Errorf("session: worker %d: %w", s.worker, err)
	}
	if err := s.c.Done(ctx); err != nil {
		return fmt.Errorf("session: worker %d: done: %w", s.worker, err)
	}
	return nil
}

// Close closes the connections.
func (s *Session) Close() error { return s.c.Close() }

// recover returns cause itself when it is not a failure the session
// recovers from; otherwise it waits for the ps to come back as the built-in
// loop does (trainer.Worker.Recover), up to RecoveryTimeout.
func (s *Session) recover(ctx context.Context, cause error) error {
	if err := s.w.Recover(ctx, s.step, cause); err != nil {
		if err == cause {
			return err
		}
		return fmt.Errorf("session: worker %d: recovery after %v: %w", s.worker, cause, err)
	}
	return nil
}
