package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Retryable reports whether a training step's error is one the worker
// recovers from (a ps down, restarted or restored, a step moved on) rather
// than one that ends the job (another model on the ps, a malformed request,
// a synchronous step that timed out with --sync_on_timeout=fail). The kinds
// are the client's own errors (client.Retryable), never gRPC codes.
func Retryable(err error) bool { return client.Retryable(err) }

// retrier paces a retry loop: every pause after the first waits longer
// (doubling from retryMin up to retryMax) unless the loop made progress
// (its step moved) since, and the line saying why it retries is logged at
// most once per --wait_log_every, with the count of retries it stands for.
// sleep and now are the clock (tests inject theirs).
type retrier struct {
	cfg      Config
	bound    string // what bounds the retries, for the log
	backoff  time.Duration
	lastStep int64
	started  bool
	lastLog  time.Time
	quiet    int // retries since the last line
	max      time.Duration
	sleep    func(ctx context.Context, d time.Duration) error
	now      func() time.Time
}

const (
	retryMin = 50 * time.Millisecond
	retryMax = 5 * time.Second
)

func newRetrier(cfg Config, bound string) *retrier {
	return &retrier{cfg: cfg, bound: bound, max: maxBackoff(cfg), sleep: Sleep, now: time.Now}
}

// maxBackoff is the longest pause between retries: retryMax, but in sync
// mode at most a tenth of --sync_timeout, so that a worker asleep in its
// backoff while a ps comes back is not the worker a synchronous step times
// out waiting for.
func maxBackoff(cfg Config) time.Duration {
	if cfg.Sync && cfg.SyncTimeout > 0 {
		return max(retryMin, min(retryMax, cfg.SyncTimeout/10))
	}
	return retryMax
}

// Sleep waits d, or until ctx ends (returning its cause).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// pause is called before retrying after err at global step step.
func (r *retrier) pause(ctx context.Context, step int64, err error) error {
	if !r.started || step != r.lastStep {
		r.backoff = 0 // progress since the last failure: retry at once
	}
	r.started, r.lastStep = true, step
	r.logf("worker %d: at global step %d: %v; waiting for the ps to recover (up to %s)", r.cfg.Cluster.Task.Index, step, err, r.bound)
	if r.backoff > 0 {
		if err := r.sleep(ctx, r.backoff); err != nil {
			return err
		}
	}
	r.backoff = min(max(2*r.backoff, retryMin), r.max)
	return nil
}

// logf logs at most once per WaitLogEvery; a line after quiet retries says
// how many it stands for.
func (r *retrier) logf(format string, args ...any) {
	now := r.now()
	if !r.lastLog.IsZero() && now.Sub(r.lastLog) < r.cfg.WaitLogEvery {
		r.quiet++
		return
	}
	if r.quiet > 0 {
		format += fmt.Sprintf(" (%d more times since the last such line)", r.quiet)
	}
	r.cfg.Logf(format, args...)
	r.lastLog, r.quiet = now, 0
}

// recoverCluster waits until every ps answers again and is initialised,
// logging what it waits for. The chief then makes the cluster consistent: if
// a ps restarted from a checkpoint (its restored step differs from the
// others'), every other ps is rolled back to that checkpoint, and the log
// says how many steps were lost. It gives up after --recovery_timeout,
// naming what it waited for.
func recoverCluster(ctx context.Context, cfg Config, c *client.Client, lastStep int64, cause error, retry *retrier) error {
	worker := cfg.Cluster.Task.Index
	rctx, cancel := context.WithTimeoutCause(ctx, cfg.RecoveryTimeout, fmt.Errorf("--recovery_timeout=%s passed", cfg.RecoveryTimeout))
	defer cancel()
	if !cfg.Cluster.IsChief() {
		if err := waitOneHistory(rctx, cfg, c, retry); err != nil {
			return fmt.Errorf("worker %d: recovery after %v: %w", worker, cause, err)
		}
		retry.logf("worker %d: every ps answers again; pulling and going on", worker)
		return nil
	}
	backoff := 100 * time.Millisecond
	for {
		statuses, err := c.WaitReady(rctx, false)
		if err != nil {
			return fmt.Errorf("worker %d: recovery after %v: %w", worker, cause, err)
		}
		err = consistent(rctx, cfg, c, statuses, lastStep)
		if err == nil {
			return nil
		}
		if !Retryable(err) {
			return err
		}
		retry.logf("chief: recovery: %v; trying again in %s", err, backoff)
		if err := Sleep(rctx, backoff); err != nil {
			return fmt.Errorf("chief: recovery after %v: %w", cause, err)
		}
		backoff = min(2*backoff, maxBackoff(cfg))
	}
}

// waitOneHistory is a worker's (not the chief's) wait, at start-up and in
// recovery, until every ps answers, is initialised, and they hold one
// history: after a ps restored a checkpoint, the chief rolls the others
// back to it first. A worker that went on before (pushing to a ps restored
// and to one not yet rolled back) would compute from two histories, and its
// gradients for the step would be lost on the ps rolled back.
func waitOneHistory(ctx context.Context, cfg Config, c *client.Client, retry *retrier) error {
	worker := cfg.Cluster.Task.Index
	for {
		statuses, err := c.WaitReady(ctx, true)
		if err != nil {
			return err
		}
		restored := restoredSteps(statuses)
		if len(restored) <= 1 {
			c.Remember(statuses)
			return nil
		}
		retry.logf("worker %d: waiting for the chief to roll the ps back to one checkpoint (restored steps by ps: %v)", worker, restored)
		if err := Sleep(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("the ps hold different histories (restored steps by ps: %v): %w", restored, err)
		}
	}
}

// restoredSteps returns the distinct restored steps of the ps, by ps, when
// they differ (nil when they all agree).
func restoredSteps(statuses []*pb.StatusResponse) []int64 {
	steps := make([]int64, len(statuses))
	same := true
	for i, st := range statuses {
		steps[i] = st.RestoredStep
		same = same && steps[i] == steps[0]
	}
	if same {
		return nil
	}
	return steps
}

// consistent is the chief's check that every ps holds state of one
// history: if their restored steps differ, the ones not at the newest
// restored checkpoint are rolled back to it.
func consistent(ctx context.Context, cfg Config, c *client.Client, statuses []*pb.StatusResponse, lastStep int64) error {
	var uninit []int
	target := int64(-1)
	for i, st := range statuses {
		if !st.Initialized {
			uninit = append(uninit, i)
		}
		target = max(target, st.RestoredStep)
	}
	if len(uninit) > 0 {
		if cfg.CheckpointDir == "" {
			return fmt.Errorf("ps %v restarted without its state and there is no checkpoint to restore it from: run with --checkpoint_dir (and --save_steps or --save_model_secs) to survive a ps failure", uninit)
		}
		// A ps serves only once it has restored the newest complete
		// checkpoint at start (RunPS), so one that answers uninitialised
		// found none then. The chief may have completed one since: the
		// ps restarted while the chief wrote its manifest. The ps then
		// waits for the chief, which restores it there and rolls the
		// others back to it.
		m, _, err := checkpoint.Verifier{Finite: true}.Latest(cfg.FS, cfg.CheckpointDir)
		if err != nil {
			return fmt.Errorf("%w: ps %v not initialised, and no checkpoint to restore them from: %v", client.ErrNotReady, uninit, err)
		}
		target = max(target, m.Step)
	}
	var behind []int
	for i, st := range statuses {
		if !st.Initialized || st.RestoredStep != target {
			behind = append(behind, i)
		}
	}
	if target < 0 || len(behind) == 0 {
		c.Remember(statuses)
		return nil
	}
	var restarted []int
	for i := range statuses {
		if !slices.Contains(behind, i) {
			restarted = append(restarted, i)
		}
	}
	if err := c.Restore(ctx, cfg.CheckpointDir, target, behind); err != nil {
		return err
	}
	if len(uninit) > 0 {
		cfg.Logf("chief: ps %v came up without state (the checkpoint of step %d was completed after they started) while the cluster was at step %d: restored ps %v from it; %d steps lost",
			uninit, target, lastStep, behind, max(0, lastStep-target))
	} else {
		cfg.Logf("chief: ps %v restarted from the checkpoint of step %d while the cluster was at step %d: rolled ps %v back to it; %d steps lost",
			restarted, target, lastStep, behind, max(0, lastStep-target))
	}
	fresh, err := c.Status(ctx)
	if err != nil {
		return err
	}
	c.Remember(fresh)
	return nil
}

// sameWorkerCount refuses, as input to fix, a ps started with another
// number of workers than the chief's cluster: every task must be given the
// same cluster, and the ps would refuse the chief's Init anyway (exit 1
// before, as if something had failed while running).
func sameWorkerCount(statuses []*pb.StatusResponse, cfg Config, c *client.Client) error {
	want := len(cfg.Cluster.Spec.Workers)
	for i, st := range statuses {
		if n := int(st.GetNumWorkers()); n > 0 && n != want {
			return &ConfigError{Err: fmt.Errorf("ps %d at %s was started with %d workers in its cluster, the chief with %d: give every task the same --worker_hosts (or TF_CONFIG cluster.worker and cluster.chief)", i, c.Addr(i), n, want)}
		}
	}
	return nil
}
