package trainer

import (
	"context"
	"errors"
	"fmt"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/vfs"
)

// Worker is what a program with its own training loop (a Go model, the
// Python binding through package session) gets of the built-in loop's
// machinery: the same start-up (the chief's lock on its checkpoint
// directory, its Init or its finding the ps initialised or restored, the
// others' wait until the ps hold one history), the same recovery after a
// ps dies or restarts (waiting for it, the chief rolling the cluster back
// to one checkpoint, backing off and logging once per --wait_log_every),
// and the chief's checkpoints every SaveSteps or SaveEvery and at the end.
//
// The program owns the client and the loop; it calls Stepped after every
// exchange that landed, Recover after one that failed, and Finish at the
// end. A Worker is used by one goroutine at a time.
type Worker struct {
	cfg    Config
	c      *client.Client
	sv     *saver // the chief's; nil for the others
	retry  *retrier
	unlock func() error
}

// StartWorker starts worker cfg.Cluster.Task of a job whose variables are
// vars: the chief initialises the ps with init() (called only if the ps
// need it), the others wait for it. It returns the global step the
// cluster is at.
func StartWorker(ctx context.Context, cfg Config, c *client.Client, vars []model.Variable, init func() model.Params) (*Worker, int64, error) {
	cfg.defaults()
	w := &Worker{cfg: cfg, c: c, retry: newRetrier(cfg, fmt.Sprintf("--recovery_timeout=%s", cfg.RecoveryTimeout))}
	if cfg.Cluster.IsChief() && cfg.CheckpointDir != "" {
		unlock, err := checkpoint.Lock(vfs.OS, cfg.CheckpointDir, checkpoint.JobID(cfg.Cluster.Spec.PS, cfg.Cluster.Spec.Workers), cfg.Logf)
		if err != nil {
			return nil, 0, &ConfigError{Err: fmt.Errorf("chief: %w", err)}
		}
		w.unlock = unlock
	}
	sv, err := startUp(ctx, cfg, c, vars, init)
	if err != nil {
		w.release()
		if errors.Is(err, client.ErrLayout) {
			err = &ConfigError{Err: err}
		}
		return nil, 0, fmt.Errorf("worker %d: start-up: %w", cfg.Cluster.Task.Index, err)
	}
	w.sv = sv
	statuses, err := c.Status(ctx)
	if err != nil {
		w.release()
		return nil, 0, fmt.Errorf("worker %d: start-up: %w", cfg.Cluster.Task.Index, err)
	}
	var step int64
	for _, st := range statuses {
		step = max(step, st.GetGlobalStep())
	}
	return w, step, nil
}

// Stepped is called after an exchange landed at global step step: the
// chief saves a checkpoint when one is due.
func (w *Worker) Stepped(ctx context.Context, step int64) error {
	return w.sv.maybe(ctx, step)
}

// Recover is called after an exchange at step failed with cause. It
// returns cause itself when that is not a failure to recover from (a
// layout that differs from the ps's is an input to fix: a *ConfigError);
// otherwise it waits for the ps and, on the chief, rolls the cluster back
// to one checkpoint, up to --recovery_timeout. The program then pulls and
// goes on from the cluster's step; the failed exchange's gradients are
// lost.
func (w *Worker) Recover(ctx context.Context, step int64, cause error) error {
	if errors.Is(cause, client.ErrLayout) {
		return &ConfigError{Err: cause}
	}
	if !retryable(cause) || ctx.Err() != nil {
		return cause
	}
	if err := w.retry.pause(ctx, step, cause); err != nil {
		return err
	}
	return recoverCluster(ctx, w.cfg, w.c, step, cause, w.retry)
}

// Finish is called when the program's training is over, at global step
// step: the chief saves the final checkpoint (recovering, as a step does,
// from a ps that dies meanwhile) and gives up its directory's lock. The
// program then tells the ps it is done (client.Done).
func (w *Worker) Finish(ctx context.Context, step int64) error {
	defer w.release()
	if w.sv == nil || w.cfg.CheckpointDir == "" || w.sv.lastStep == step {
		return nil
	}
	for {
		err := w.sv.save(ctx, step)
		if err == nil {
			return nil
		}
		if err := w.Recover(ctx, step, err); err != nil {
			return fmt.Errorf("final checkpoint: %w", err)
		}
		statuses, err := w.c.Status(ctx)
		if err != nil {
			return fmt.Errorf("final checkpoint: %w", err)
		}
		step = 0
		for _, st := range statuses {
			step = max(step, st.GetGlobalStep())
		}
	}
}

func (w *Worker) release() {
	if w.unlock != nil {
		if err := w.unlock(); err != nil {
			w.cfg.Logf("chief: %v", err)
		}
		w.unlock = nil
	}
}
