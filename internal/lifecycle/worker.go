// Package lifecycle is a worker's life around its training loop, the part
// that the built-in loops (package trainer) and a program's own loop
// (package session, and through it the Python binding) share: the start-up
// (the chief's lock on its checkpoint directory, its Init or its finding
// the ps initialised or restored, the others' wait until the ps hold one
// history), the recovery after a ps dies or restarts (waiting for it, the
// chief rolling the cluster back to one checkpoint, backing off and
// logging once per --wait_log_every), the chief's checkpoints every
// SaveSteps or SaveEvery and at the end, and the wait for a step's call,
// which says every WaitLogEvery what it waits for.
//
// A loop uses it so:
//
//	w, err := lifecycle.New(cfg)          // the chief locks its checkpoint directory
//	defer w.Close()
//	err = w.Start(ctx, c, vars, init)     // the chief's Init, the others' wait
//	for step < goal {
//		// compute, exchange with the ps ...
//		if err != nil {
//			if err := w.Recover(ctx, step, err); err != nil { return err }
//			continue // pull, and go on from the cluster's step
//		}
//		err = w.Stepped(ctx, step) // the chief's checkpoint, when one is due
//	}
//	err = w.Finish(ctx, step) // the final checkpoint
//
// The program owns the client and the loop. A Worker is used by one
// goroutine at a time.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Worker is one worker's lifecycle. It is used by the goroutine that runs
// the worker's loop, one call at a time. A nil *Worker (a loop run without
// a cluster, as tests and the standalone trainer do) saves nothing.
type Worker struct {
	cfg    Config
	c      *client.Client
	sv     *saver // the chief's; nil for the others
	retry  *retrier
	unlock func() error
}

// New prepares worker cfg.Cluster.Task: the chief of a job with a
// checkpoint directory takes the directory's lock (one job per
// directory), refused, as a *ConfigError, if another job holds it. Close
// gives it back.
func New(cfg Config) (*Worker, error) {
	cfg.Defaults()
	w := &Worker{cfg: cfg, retry: newRetrier(cfg, fmt.Sprintf("--recovery_timeout=%s", cfg.RecoveryTimeout))}
	if cfg.Cluster.IsChief() && cfg.CheckpointDir != "" {
		unlock, err := checkpoint.Lock(cfg.FS, cfg.CheckpointDir, checkpoint.JobID(cfg.Cluster.Spec.PS, cfg.Cluster.Spec.Workers), cfg.Logf)
		if err != nil {
			return nil, &ConfigError{Err: fmt.Errorf("chief: %w", err)}
		}
		w.unlock = unlock
	}
	return w, nil
}

// Start brings the worker up over c, within StartupTimeout: the chief
// waits for every ps, initialises them with init() (called only if they
// need it) and saves the first checkpoint of a fresh run; the others wait
// until every ps is initialised and they hold one history. A ps that dies
// meanwhile is waited for and the start-up tried again. A layout that
// differs from the ps's is a *ConfigError.
func (w *Worker) Start(ctx context.Context, c *client.Client, vars []model.Variable, init func() model.Params) error {
	w.c = c
	sv, err := startUp(ctx, w.cfg, c, vars, init)
	if err != nil {
		if errors.Is(err, client.ErrLayout) {
			err = &ConfigError{Err: err}
		}
		return fmt.Errorf("worker %d: start-up: %w", w.cfg.Cluster.Task.Index, err)
	}
	w.sv = sv
	return nil
}

// SetSync records the mode the ps train in when it is not the one
// configured (a restored checkpoint keeps its mode: the cluster's wins),
// for the manifests and the backoff.
func (w *Worker) SetSync(sync bool) {
	w.cfg.Sync = sync
	if w.sv != nil {
		w.sv.settle(context.Background()) // a save in the background reads cfg; bounded by its own context
		w.sv.cfg.Sync = sync
	}
	w.retry = newRetrier(w.cfg, fmt.Sprintf("--recovery_timeout=%s", w.cfg.RecoveryTimeout))
}

// Stepped is called after an exchange landed at global step step: the
// chief saves a checkpoint when one is due. A synchronous shard that moved
// on (backup workers) is not an error: the save is tried again at the
// next step.
func (w *Worker) Stepped(ctx context.Context, step int64) error {
	if w == nil {
		return nil
	}
	return w.sv.maybe(ctx, step)
}

// Due reports whether the chief's checkpoint is due at step (false for
// the other workers): a program that saves a state of its own with the
// checkpoint (SetState) asks before it makes one.
func (w *Worker) Due(step int64) bool {
	return w != nil && w.sv.due(step)
}

// SetState gives the chief's next checkpoint a state of the program's own
// (bytes it alone reads: checkpoint.WriteUserState), written before the
// manifest so that the checkpoint holds it once complete; the save after
// that has none unless set again. The other workers ignore it.
func (w *Worker) SetState(state []byte) {
	if w != nil && w.sv != nil {
		w.sv.state = state
	}
}

// Recover is called after an exchange at step failed with cause. It
// returns cause itself when that is not a failure to recover from (a
// layout that differs from the ps's is an input to fix: a *ConfigError);
// otherwise it pauses (Pause) and waits for the cluster (Rejoin). The
// program then pulls and goes on from the cluster's step; the failed
// exchange's gradients are lost.
func (w *Worker) Recover(ctx context.Context, step int64, cause error) error {
	if errors.Is(cause, client.ErrLayout) {
		return &ConfigError{Err: cause}
	}
	if !Retryable(cause) || ctx.Err() != nil {
		return cause
	}
	if w != nil {
		// A save in the background ends (it fails too, most likely)
		// before the cluster is looked at again.
		if err := w.sv.settle(ctx); err != nil {
			return err
		}
	}
	if err := w.Pause(ctx, step, cause); err != nil {
		return err
	}
	return w.Rejoin(ctx, step, cause)
}

// Pause is the backoff before a recovery from cause at step: none after
// progress since the last failure, then doubling up to a bound; the line
// saying why is logged at most once per WaitLogEvery. It returns ctx's
// cause if ctx ends first.
func (w *Worker) Pause(ctx context.Context, step int64, cause error) error {
	return w.retry.pause(ctx, step, cause)
}

// Rejoin waits, up to RecoveryTimeout, until every ps answers again and
// is initialised; the chief then rolls the cluster back to one checkpoint
// if a ps restored one (see recoverCluster).
func (w *Worker) Rejoin(ctx context.Context, step int64, cause error) error {
	return recoverCluster(ctx, w.cfg, w.c, step, cause, w.retry)
}

// SaveAt has the chief save a checkpoint of step, unless it saved that
// step last or the job has no checkpoint directory; the others do
// nothing. A failure is the save's (Recover from it).
func (w *Worker) SaveAt(ctx context.Context, step int64) error {
	if w == nil || w.sv == nil || w.cfg.CheckpointDir == "" {
		return nil
	}
	if err := w.sv.settle(ctx); err != nil {
		return err
	}
	if w.sv.lastStep == step {
		return nil
	}
	return w.sv.saveNow(ctx, step)
}

// Finish is called when the program's training is over, at global step
// step: the chief saves the final checkpoint (recovering, as a step does,
// from a ps that dies meanwhile) and gives up its directory's lock. The
// program then tells the ps it is done (client.Done).
func (w *Worker) Finish(ctx context.Context, step int64) error {
	defer w.Close()
	for {
		err := w.SaveAt(ctx, step)
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

// Close gives up the chief's lock on its checkpoint directory, if it holds
// it. It may be called more than once.
func (w *Worker) Close() {
	if w.sv != nil {
		// Not while a save in the background writes into the directory;
		// bounded by the save's own context and deadlines.
		if err := w.sv.settle(context.Background()); err != nil {
			w.cfg.Logf("chief: %v", err)
		}
	}
	if w.unlock != nil {
		if err := w.unlock(); err != nil {
			w.cfg.Logf("chief: %v", err)
		}
		w.unlock = nil
	}
}

// startUp brings a worker up, within --startup_timeout: the chief waits
// for every ps, initialises them and saves the first checkpoint
// (chiefStart); another worker waits until every ps is initialised and
// they hold one history. A ps that dies meanwhile is waited for (logging
// every --wait_log_every) and the start-up is tried again, as a training
// step is: Init is a no-op on a ps already initialised.
func startUp(ctx context.Context, cfg Config, c *client.Client, vars []model.Variable, init func() model.Params) (*saver, error) {
	wctx, cancel := context.WithTimeoutCause(ctx, cfg.StartupTimeout,
		fmt.Errorf("--startup_timeout=%s passed", cfg.StartupTimeout))
	defer cancel()
	retry := newRetrier(cfg, fmt.Sprintf("--startup_timeout=%s", cfg.StartupTimeout))
	initialised := false // by this chief, in this start-up
	for {
		var sv *saver
		var err error
		if cfg.Cluster.IsChief() {
			sv, err = chiefStart(wctx, cfg, c, vars, init, &initialised)
		} else {
			err = waitOneHistory(wctx, cfg, c, retry)
		}
		if err == nil {
			return sv, nil
		}
		if !Retryable(err) || wctx.Err() != nil {
			if wctx.Err() != nil && ctx.Err() == nil && !strings.Contains(err.Error(), "--startup_timeout") {
				return nil, fmt.Errorf("%w (%w)", err, context.Cause(wctx))
			}
			return nil, err
		}
		if err := retry.pause(wctx, 0, err); err != nil {
			return nil, err
		}
	}
}

// chiefStart brings the cluster up: wait for every ps, initialise them (a
// no-op for ps already initialised, as after a chief restart or a restore),
// make their states consistent, and save the first checkpoint of a fresh
// run so that a ps failure always has one to restore. initialised says
// this chief initialised the cluster in an earlier try of this start-up
// (then its first checkpoint failed); chiefStart sets it.
func chiefStart(ctx context.Context, cfg Config, c *client.Client, vars []model.Variable, init func() model.Params, initialised *bool) (*saver, error) {
	statuses, err := c.WaitReady(ctx, false)
	if err != nil {
		return nil, err
	}
	if err := sameWorkerCount(statuses, cfg, c); err != nil {
		return nil, err
	}
	// Before Init: Init gives a blank ps the initial values, which beside
	// ps that trained on would make a model of two histories.
	if err := blankBesideTrained(ctx, cfg, c, statuses, *initialised); err != nil {
		return nil, err
	}
	cfg.Hook("init", 0)
	step, err := c.Init(ctx, init(), client.InitOptions{
		Optimizer: cfg.Optimizer, Sync: cfg.Sync, ReplicasToAggregate: cfg.ReplicasToAggregate,
		NumWorkers: len(cfg.Cluster.Spec.Workers), MaxStaleness: cfg.MaxStaleness,
		SyncTimeout: cfg.SyncTimeout, SyncProceed: cfg.SyncProceed, GoalStep: cfg.GoalStep,
	})
	if err != nil {
		return nil, err
	}
	*initialised = true
	statuses, err = c.Status(ctx)
	if err != nil {
		return nil, err
	}
	fresh := true
	for _, st := range statuses {
		fresh = fresh && st.RestoredStep < 0
	}
	if err := consistent(ctx, cfg, c, statuses, step); err != nil {
		return nil, err
	}
	switch {
	case fresh && step == 0:
		cfg.Logf("chief initialised %d variables on %d ps at global step %d", len(vars), c.NumPS(), step)
	case fresh:
		cfg.Logf("chief: the ps were already initialised; training goes on from global step %d", step)
	default:
		cfg.Logf("chief: the ps restored a checkpoint; training goes on from global step %d", step)
	}
	sv := newSaver(cfg, c, step)
	if cfg.CheckpointDir != "" && fresh && step == 0 {
		if err := sv.saveNow(ctx, step); err != nil {
			return nil, fmt.Errorf("first checkpoint: %w", err)
		}
	} else if cfg.CheckpointDir != "" {
		// A restarted chief (or one started on a restored cluster) saves
		// at the first step it sees complete, not at the next interval:
		// the chief it replaces may have died saving, and the newest
		// complete checkpoint may be an interval old already.
		sv.force = true
	}
	return sv, nil
}

// blankBesideTrained is the chief's check at start-up, before its Init,
// that no ps came up blank beside ps that trained: a ps restarted while
// the chief was down finds no checkpoint to restore at its start when none
// was complete (or none is configured). Init would give it the initial
// values while the others hold their trained ones, and the job would go on
// from a model that is neither. With a complete checkpoint in
// --checkpoint_dir every ps is restored to it; without one
// the chief refuses, naming the ps, rather than reset the trained ps
// (their training may be what the user wants: a ps given the wrong
// --checkpoint_dir is a likely cause, and the in-run recovery refuses the
// same state alike). A ps initialised at step 0 and never restored (a
// chief that died during its Init) holds the initial values: the blank
// ones are initialised beside it. So are they after this chief's own Init
// (ownInit: a ps died during its first checkpoint, and there is none to
// restore): the other ps then hold only the steps the workers trained
// since that Init, and the log says how many.
func blankBesideTrained(ctx context.Context, cfg Config, c *client.Client, statuses []*pb.StatusResponse, ownInit bool) error {
	var blank, trained []int
	var step int64
	for i, st := range statuses {
		switch {
		case !st.Initialized:
			blank = append(blank, i)
		case st.GlobalStep > 0 || st.RestoredStep >= 0:
			trained = append(trained, i)
			step = max(step, st.GlobalStep)
		}
	}
	if len(blank) == 0 || len(trained) == 0 {
		return nil
	}
	why := "the job has no --checkpoint_dir"
	if cfg.CheckpointDir != "" {
		m, _, err := checkpoint.Verifier{Finite: true}.Latest(cfg.FS, cfg.CheckpointDir)
		if err == nil {
			// Every ps, the trained ones too: a trained ps's restored
			// step may be this checkpoint's though it trained on since.
			all := make([]int, len(statuses))
			for i := range all {
				all[i] = i
			}
			if err := c.Restore(ctx, cfg.CheckpointDir, m.Step, all); err != nil {
				return err
			}
			cfg.Logf("chief: ps %v came up blank (restarted with nothing to restore) while ps %v held global step %d: restored every ps from the newest complete checkpoint, of step %d; %d steps lost",
				blank, trained, step, m.Step, max(0, step-m.Step))
			fresh, err := c.Status(ctx)
			if err != nil {
				return err
			}
			c.Remember(fresh)
			return nil
		}
		why = fmt.Sprintf("%s holds no complete checkpoint (%v)", cfg.CheckpointDir, err)
	}
	if ownInit {
		cfg.Logf("chief: ps %v came up blank before the first checkpoint was complete, while ps %v hold global step %d trained since this chief's Init: initialising ps %v again at the initial values (their updates of those steps are lost)",
			blank, trained, step, blank)
		return nil
	}
	return fmt.Errorf("chief: ps %v came up blank (restarted with nothing to restore) while ps %v hold global step %d, and %s: initialising ps %v would mix initial values with trained ones, so the job cannot go on; restart every ps to train from the start, or start the ps with the --checkpoint_dir that holds the job's checkpoints",
		blank, trained, step, why, blank)
}
