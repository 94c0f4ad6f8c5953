package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/vfs"
)

// saver is the chief's checkpoint schedule. It is used by the goroutine
// that runs the chief's loop, one call at a time. In asynchronous training
// a periodic save runs on a goroutine of its own (maybe) while the chief
// trains on: the ps cut their state in an instant and write it while
// pushes go on, so the chief's own pushes need not wait for the write.
// While it runs, that goroutine alone uses every field below but
// inflight, bgErr and bgStep; the loop's goroutine looks at them again only
// after inflight is closed (or, for state, not at all: the save took it).
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
	// state is the program's own state for the next save (SetState),
	// written into the checkpoint before its manifest, then dropped.
	state []byte
	// retryLog is when the last line about a save to be tried again was
	// logged, and retries the failures since that line stands for.
	retryLog time.Time
	retries  int
	// inflight, when not nil, is closed when the save started in the
	// background ends, with its error in bgErr and its step in bgStep.
	inflight chan struct{}
	bgErr    error
	bgStep   int64
	bgStart  time.Time
}

func newSaver(cfg Config, c *client.Client, step int64) *saver {
	return &saver{cfg: cfg, c: c, fs: cfg.FS, lastStep: step, lastTime: time.Now(), parent: -1, base: -1}
}

// nextParent is the checkpoint the next save is a delta of, or -1 for a
// full one: the first save of this chief, and every FullCheckpointEvery-th.
func (s *saver) nextParent() int64 {
	if !s.cfg.IncrementalCheckpoints || s.parent < 0 || s.deltas+1 >= max(1, s.cfg.FullCheckpointEvery) {
		return -1
	}
	return s.parent
}

// due reports whether a checkpoint is due at step, counted from the last
// save started: while one is written in the background, from its step and
// start (its goroutine owns the other fields meanwhile).
func (s *saver) due(step int64) bool {
	if s == nil || s.cfg.CheckpointDir == "" {
		return false
	}
	// Read the fields only when no save runs: its goroutine writes them.
	var (
		last  int64
		at    time.Time
		force bool
	)
	if s.running() {
		last, at = s.bgStep, s.bgStart
	} else {
		last, at, force = s.lastStep, s.lastTime, s.force
	}
	if step <= last {
		return false
	}
	return force || (s.cfg.SaveSteps > 0 && step-last >= s.cfg.SaveSteps) ||
		(s.cfg.SaveEvery > 0 && time.Since(at) >= s.cfg.SaveEvery)
}

// maybe saves if due. A synchronous shard that moved on (backup workers)
// is not an error: the save is tried again at the next step.
//
// In asynchronous training the save runs in the background and maybe
// returns at once; the next save starts only once it has ended, so saves
// keep their order, and none is skipped: a save due while the one before
// is still being written waits for it (the chief waits only when a save
// outlasts --save_steps). Its failure comes from a later call of maybe (or
// of settle), a failure for now (Retryable) logged and the save tried
// again at the next step.
func (s *saver) maybe(ctx context.Context, step int64) error {
	if s == nil {
		return nil
	}
	if s.inflight != nil {
		if s.running() && !s.due(step) {
			return nil // the save before this one is still being written
		}
		if err := s.settle(ctx); err != nil {
			return err
		}
	}
	if !s.due(step) {
		return nil
	}
	if !s.cfg.Sync && s.state == nil {
		// Synchronous training cuts every shard at one step, which the
		// chief's own pushes would move on from: it waits. So does a
		// save with the program's state (Worker.SetState), which the
		// program makes at the step it asked about (Due).
		done := make(chan struct{})
		s.inflight, s.bgStep, s.bgStart = done, step, time.Now()
		go func() {
			defer close(done)
			s.bgErr = s.save(ctx, step, nil)
		}()
		return nil
	}
	err := s.saveNow(ctx, step)
	if err != nil && Retryable(err) {
		s.retried(step, err, time.Now())
		return nil
	}
	return err
}

// running reports whether a save runs in the background.
func (s *saver) running() bool {
	if s.inflight == nil {
		return false
	}
	select {
	case <-s.inflight:
		return false
	default:
		return true
	}
}

// collect takes the result of the background save, which has ended: a
// failure for now is logged (retried) and nil.
func (s *saver) collect() error {
	err, step := s.bgErr, s.bgStep
	s.inflight, s.bgErr = nil, nil
	if err != nil && Retryable(err) {
		s.retried(step, err, time.Now())
		return nil
	}
	return err
}

// settle waits for the save running in the background, if one is, to
// end (the save is bounded by ctx and by its calls' own deadlines), and
// returns collect's result, or ctx's error if ctx ends first.
func (s *saver) settle(ctx context.Context) error {
	if s == nil || s.inflight == nil {
		return nil
	}
	if s.running() {
		s.cfg.Logf("chief: waiting for the checkpoint of step %d being written to end", s.bgStep)
	}
	select {
	case <-s.inflight:
		return s.collect()
	case <-ctx.Done():
		return fmt.Errorf("chief: waiting for the checkpoint of step %d being written: %w", s.bgStep, context.Cause(ctx))
	}
}

// saveNow saves step in the caller's goroutine, with the program's state
// if one is set (kept for the next try if the save fails).
func (s *saver) saveNow(ctx context.Context, step int64) error {
	if err := s.save(ctx, step, s.state); err != nil {
		return err
	}
	s.state = nil
	return nil
}

// retried logs that the save of step failed for now and is tried again at
// the next step, at most once per WaitLogEvery with the count of failures
// the line stands for, so a ps that refuses saves for a while (a cut still
// being written, a replica catching up) is named without flooding the log.
func (s *saver) retried(step int64, err error, now time.Time) {
	s.retries++
	if !s.retryLog.IsZero() && now.Sub(s.retryLog) < s.cfg.WaitLogEvery {
		return
	}
	s.cfg.Logf("chief: checkpoint of step %d not saved, trying again at the next step (%d failed since the last such line): %v", step, s.retries, err)
	s.retryLog, s.retries = now, 0
}

// save writes a checkpoint of step, with the program's state (nil:
// none): every ps its shard, then the manifest, then old checkpoints are
// pruned.
func (s *saver) save(ctx context.Context, step int64, state []byte) (err error) {
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
	cfg.Hook("save", step)
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
	if state != nil {
		if err := checkpoint.WriteUserState(s.fs, cfg.CheckpointDir, step, state); err != nil {
			return fmt.Errorf("checkpoint of step %d: %w", step, err)
		}
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
	cfg.Hook("manifest", step)
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
		GoalStep: max(cfg.GoalStep, 0),
	}
	for _, v := range s.c.Plan().Vars {
		vi := checkpoint.VariableInfo{Name: v.Name, Slots: slots}
		if v.Optimizer != nil {
			if vi.Slots, err = ruleSlots(*v.Optimizer); err != nil {
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
			if ti.Slots, err = ruleSlots(*t.Optimizer); err != nil {
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

// ruleSlots names the state slots of the update rule c (a variable's or
// a table's, when it has one of its own).
func ruleSlots(c optim.Config) ([]string, error) {
	r, err := optim.New(c)
	if err != nil {
		return nil, err
	}
	return shard.SlotNames(r.Name(), r.StateSlots()), nil
}
