package trainer

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/vfs"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// retryable reports whether a training step's error is one the worker
// recovers from (a ps down, restarted or restored, a step moved on) rather
// than one that ends the job (another model on the ps, a malformed request,
// a synchronous step that timed out with --sync_on_timeout=fail). The kinds
// are the client's own errors (client.Retryable), never gRPC codes.
func retryable(err error) bool { return client.Retryable(err) }

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
	return &retrier{cfg: cfg, bound: bound, max: maxBackoff(cfg), sleep: sleepCtx, now: time.Now}
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

func sleepCtx(ctx context.Context, d time.Duration) error {
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
		if !retryable(err) {
			return err
		}
		retry.logf("chief: recovery: %v; trying again in %s", err, backoff)
		if err := sleepCtx(rctx, backoff); err != nil {
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
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
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
		m, _, err := checkpoint.Verifier{Finite: true}.Latest(vfs.OS, cfg.CheckpointDir)
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

// saver is the chief's checkpoint schedule.
type saver struct {
	cfg      Config
	c        *client.Client
	fs       vfs.FS
	lastStep int64
	lastTime time.Time
	force    bool // save at the next step (a restarted chief)
	// Incremental checkpoints: the checkpoint this chief saved last (-1:
	// none; the next save is full), the full one its chain starts from,
	// and the deltas saved since.
	parent, base int64
	deltas       int
}

func newSaver(cfg Config, c *client.Client, step int64) *saver {
	return &saver{cfg: cfg, c: c, fs: vfs.OS, lastStep: step, lastTime: time.Now(), parent: -1, base: -1}
}

// nextParent is the checkpoint the next save is a delta of, or -1 for a
// full one: the first save of this chief, and every FullCheckpointEvery-th.
func (s *saver) nextParent() int64 {
	if !s.cfg.IncrementalCheckpoints || s.parent < 0 || s.deltas+1 >= max(1, s.cfg.FullCheckpointEvery) {
		return -1
	}
	return s.parent
}

// due reports whether a checkpoint is due at step.
func (s *saver) due(step int64) bool {
	if s == nil || s.cfg.CheckpointDir == "" || step <= s.lastStep {
		return false
	}
	return s.force || (s.cfg.SaveSteps > 0 && step-s.lastStep >= s.cfg.SaveSteps) ||
		(s.cfg.SaveEvery > 0 && time.Since(s.lastTime) >= s.cfg.SaveEvery)
}

// maybe saves if due. A synchronous shard that moved on (backup workers)
// is not an error: the save is tried again at the next step.
func (s *saver) maybe(ctx context.Context, step int64) error {
	if !s.due(step) {
		return nil
	}
	err := s.save(ctx, step)
	if err != nil && retryable(err) {
		return nil
	}
	return err
}

// save writes a checkpoint of step: every ps its shard, then the manifest,
// then old checkpoints are pruned.
func (s *saver) save(ctx context.Context, step int64) (err error) {
	cfg := s.cfg
	start := time.Now()
	var size int64
	defer func() { cfg.Observer.CheckpointSaved(step, size, time.Since(start), err) }()
	if _, err := s.fs.Stat(filepath.Join(cfg.CheckpointDir, checkpoint.CheckpointName(step), checkpoint.ManifestName)); err == nil {
		// Saved by a chief before this one (which died after it).
		cfg.Logf("chief: the checkpoint of step %d in %s is already complete", step, cfg.CheckpointDir)
		s.lastStep, s.lastTime, s.force = step, time.Now(), false
		s.parent = -1 // the ps may not have cut it: the next save is full
		return nil
	}
	cfg.Logf("chief: saving checkpoint of step %d in %s", step, cfg.CheckpointDir)
	testHook("save", step)
	parent := s.nextParent()
	infos, err := s.c.CheckpointShardsIncremental(ctx, cfg.CheckpointDir, step, cfg.IncrementalCheckpoints, parent)
	if err == nil {
		// A ps that restarted since the chief last heard from it wrote
		// the state it restored, not that of step: no manifest for it.
		err = s.c.CheckIncarnations(ctx)
	}
	if err != nil {
		return fmt.Errorf("checkpoint of step %d: %w", step, err)
	}
	m, err := s.manifest(step, infos)
	if err != nil {
		return err
	}
	for _, in := range infos {
		if in.Delta {
			m.Kind, m.Parent, m.Base = checkpoint.KindDelta, parent, s.base
		}
	}
	testHook("manifest", step)
	if err := checkpoint.WriteManifest(s.fs, cfg.CheckpointDir, m); err != nil && !errors.Is(err, checkpoint.ErrExists) {
		return fmt.Errorf("checkpoint of step %d: %w", step, err)
	}
	removed, err := checkpoint.Prune(s.fs, cfg.CheckpointDir, cfg.KeepCheckpoints)
	if err != nil {
		cfg.Logf("chief: pruning old checkpoints: %v", err)
	}
	for _, in := range infos {
		size += in.Size
	}
	kind := ""
	if cfg.IncrementalCheckpoints {
		kind = "full, "
		if m.IsDelta() {
			kind = fmt.Sprintf("a delta of %s on %s, ", checkpoint.CheckpointName(m.Parent), checkpoint.CheckpointName(m.Base))
		}
	}
	cfg.Logf("chief: saved checkpoint of step %d in %s (%s%d shards, %.1f MiB, %s; removed %d old)", step, cfg.CheckpointDir, kind, len(infos), float64(size)/(1<<20), time.Since(start).Round(time.Millisecond), len(removed))
	s.lastStep, s.lastTime, s.force = step, time.Now(), false
	if m.IsDelta() {
		s.deltas++
	} else {
		s.base, s.deltas = step, 0
	}
	s.parent = step
	return nil
}

// manifest describes the checkpoint: layout, optimizer and mode.
func (s *saver) manifest(step int64, infos []checkpoint.ShardInfo) (checkpoint.Manifest, error) {
	cfg := s.cfg
	rule, err := optim.New(cfg.Optimizer)
	if err != nil {
		return checkpoint.Manifest{}, err
	}
	slots := shard.SlotNames(rule.Name(), rule.StateSlots())
	mode := "async"
	if cfg.Sync {
		mode = "sync"
	}
	m := checkpoint.Manifest{
		Step: step, Time: time.Now().UTC(),
		NumPS: s.c.NumPS(), NumWorkers: len(cfg.Cluster.Spec.Workers),
		Shards: infos,
	}
	tr := checkpoint.Training{
		Mode: mode, Optimizer: cfg.Optimizer,
		ReplicasToAggregate: cfg.ReplicasToAggregate, MaxStaleness: cfg.MaxStaleness,
		SplitBytes: int64(cfg.SplitBytes), SyncTimeout: cfg.SyncTimeout, SyncProceed: cfg.SyncProceed,
	}
	for _, v := range s.c.Plan().Vars {
		vi := checkpoint.VariableInfo{Name: v.Name, Slots: slots}
		if v.Optimizer != nil {
			if vi.Slots, err = ownSlots(*v.Optimizer); err != nil {
				return m, fmt.Errorf("variable %q: %w", v.Name, err)
			}
			if tr.VarOptimizers == nil {
				tr.VarOptimizers = map[string]*optim.Config{}
			}
			tr.VarOptimizers[v.Name] = v.Optimizer
		}
		for _, d := range v.Shape {
			vi.Shape = append(vi.Shape, int64(d))
		}
		rowLen := v.Size()
		if len(v.Shape) > 0 {
			rowLen = v.Size() / v.Shape[0]
		}
		for _, p := range v.Parts {
			part := checkpoint.Part{Shard: p.PS}
			if len(v.Parts) > 1 {
				part.Rows = []int64{int64(p.Offset / rowLen), int64((p.Offset + p.Len) / rowLen)}
			}
			vi.Parts = append(vi.Parts, part)
		}
		m.Variables = append(m.Variables, vi)
	}
	for _, t := range s.c.Tables() {
		ti := checkpoint.TableInfo{Name: t.Name, Dim: int64(t.Dim), Slots: slots}
		if t.Optimizer != nil {
			if ti.Slots, err = ownSlots(*t.Optimizer); err != nil {
				return m, fmt.Errorf("table %q: %w", t.Name, err)
			}
		}
		for k := range s.c.NumPS() {
			ti.Shards = append(ti.Shards, k)
		}
		m.Tables = append(m.Tables, ti)
		tr.Tables = append(tr.Tables, checkpoint.TableSpec{Name: t.Name, Dim: int32(t.Dim), Initializer: t.Init, InitStddev: t.InitStddev,
			Seed: t.Seed, MinCount: t.MinCount, EvictAfterSteps: t.EvictAfterSteps, Optimizer: t.Optimizer})
	}
	if err := m.SetTraining(tr); err != nil {
		return m, err
	}
	return m, nil
}

// ownSlots names the state slots of a variable's or table's own rule.
func ownSlots(c optim.Config) ([]string, error) {
	r, err := optim.New(c)
	if err != nil {
		return nil, err
	}
	return shard.SlotNames(r.Name(), r.StateSlots()), nil
}
