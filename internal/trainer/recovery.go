package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/vfs"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// retryable reports whether a training step's error is one the worker
// recovers from (a ps down, restarted or restored, a step moved on) rather
// than one that ends the job (a malformed request, a synchronous step that
// timed out with --sync_on_timeout=fail).
func retryable(err error) bool {
	var re *client.RestartedError
	if errors.As(err, &re) {
		return true
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return false
	}
	switch se.GRPCStatus().Code() {
	case codes.Unavailable, codes.Aborted, codes.FailedPrecondition:
		return true
	}
	return false
}

// recoverCluster waits until every ps answers again and is initialised,
// logging what it waits for. The chief then makes the cluster consistent: if
// a ps restarted from a checkpoint (its restored step differs from the
// others'), every other ps is rolled back to that checkpoint, and the log
// says how many steps were lost. It gives up after --recovery_timeout.
func recoverCluster(ctx context.Context, cfg Config, c *client.Client, lastStep int64, cause error) error {
	worker := cfg.Cluster.Task.Index
	cfg.Logf("worker %d: at global step %d: %v; waiting for the ps to recover (up to --recovery_timeout=%s)", worker, lastStep, cause, cfg.RecoveryTimeout)
	rctx, cancel := context.WithTimeoutCause(ctx, cfg.RecoveryTimeout, fmt.Errorf("--recovery_timeout=%s passed", cfg.RecoveryTimeout))
	defer cancel()
	backoff := 100 * time.Millisecond
	var lastLog time.Time
	for {
		statuses, err := c.WaitReady(rctx, !cfg.Cluster.IsChief())
		if err != nil {
			return fmt.Errorf("worker %d: recovery: %w", worker, err)
		}
		if !cfg.Cluster.IsChief() {
			// Go on only once the ps hold one history: after a ps restored a
			// checkpoint, the chief rolls the others back to it first.
			if restored := restoredSteps(statuses); len(restored) > 1 {
				if time.Since(lastLog) >= cfg.WaitLogEvery {
					cfg.Logf("worker %d: waiting for the chief to roll the ps back to one checkpoint (restored steps by ps: %v)", worker, restored)
					lastLog = time.Now()
				}
				select {
				case <-time.After(200 * time.Millisecond):
					continue
				case <-rctx.Done():
					return fmt.Errorf("worker %d: recovery: %w", worker, context.Cause(rctx))
				}
			}
			c.Remember(statuses)
			cfg.Logf("worker %d: every ps answers again; pulling and going on", worker)
			return nil
		}
		err = consistent(rctx, cfg, c, statuses, lastStep)
		if err == nil {
			return nil
		}
		if !retryable(err) {
			return err
		}
		cfg.Logf("chief: recovery: %v; trying again in %s", err, backoff)
		select {
		case <-time.After(backoff):
		case <-rctx.Done():
			return fmt.Errorf("chief: recovery: %w", context.Cause(rctx))
		}
		backoff = min(2*backoff, 5*time.Second)
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
		return status.Errorf(codes.FailedPrecondition, "ps %v not initialised yet (restoring a checkpoint?)", uninit)
	}
	var behind []int
	for i, st := range statuses {
		if st.RestoredStep != target {
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
	cfg.Logf("chief: ps %v restarted from the checkpoint of step %d while the cluster was at step %d: rolled ps %v back to it; %d steps lost",
		restarted, target, lastStep, behind, max(0, lastStep-target))
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
}

func newSaver(cfg Config, c *client.Client, step int64) *saver {
	return &saver{cfg: cfg, c: c, fs: vfs.OS, lastStep: step, lastTime: time.Now()}
}

// due reports whether a checkpoint is due at step.
func (s *saver) due(step int64) bool {
	if s == nil || s.cfg.CheckpointDir == "" || step <= s.lastStep {
		return false
	}
	return (s.cfg.SaveSteps > 0 && step-s.lastStep >= s.cfg.SaveSteps) ||
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
func (s *saver) save(ctx context.Context, step int64) error {
	cfg := s.cfg
	start := time.Now()
	infos, err := s.c.CheckpointShards(ctx, cfg.CheckpointDir, step)
	if err != nil {
		return fmt.Errorf("checkpoint of step %d: %w", step, err)
	}
	m, err := s.manifest(step, infos)
	if err != nil {
		return err
	}
	if err := checkpoint.WriteManifest(s.fs, cfg.CheckpointDir, m); err != nil && !errors.Is(err, checkpoint.ErrExists) {
		return fmt.Errorf("checkpoint of step %d: %w", step, err)
	}
	removed, err := checkpoint.Prune(s.fs, cfg.CheckpointDir, cfg.KeepCheckpoints)
	if err != nil {
		cfg.Logf("chief: pruning old checkpoints: %v", err)
	}
	var size int64
	for _, in := range infos {
		size += in.Size
	}
	cfg.Logf("chief: saved checkpoint of step %d in %s (%d shards, %.1f MiB, %s; removed %d old)", step, cfg.CheckpointDir, len(infos), float64(size)/(1<<20), time.Since(start).Round(time.Millisecond), len(removed))
	s.lastStep, s.lastTime = step, time.Now()
	return nil
}

// manifest describes the checkpoint: layout, optimizer and mode.
func (s *saver) manifest(step int64, infos []checkpoint.ShardInfo) (checkpoint.Manifest, error) {
	cfg := s.cfg
	rule, err := optim.New(cfg.Optimizer)
	if err != nil {
		return checkpoint.Manifest{}, err
	}
	slots := server.SlotNames(rule.Name(), rule.StateSlots())
	opt, err := json.Marshal(cfg.Optimizer)
	if err != nil {
		return checkpoint.Manifest{}, err
	}
	mode := "async"
	if cfg.Sync {
		mode = "sync"
	}
	m := checkpoint.Manifest{
		Step: step, Time: time.Now().UTC(), Mode: mode,
		NumPS: s.c.NumPS(), NumWorkers: len(cfg.Cluster.Spec.Workers),
		Optimizer: opt, Shards: infos,
		Meta: map[string]string{
			server.MetaReplicas:     strconv.Itoa(cfg.ReplicasToAggregate),
			server.MetaMaxStaleness: strconv.FormatInt(cfg.MaxStaleness, 10),
			server.MetaSplitBytes:   strconv.Itoa(cfg.SplitBytes),
			server.MetaSyncTimeout:  strconv.FormatInt(cfg.SyncTimeout.Milliseconds(), 10),
			server.MetaSyncProceed:  strconv.FormatBool(cfg.SyncProceed),
		},
	}
	for _, v := range s.c.Plan().Vars {
		vi := checkpoint.VariableInfo{Name: v.Name, Slots: slots}
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
	var specs []*pb.TableSpec
	for _, t := range s.c.Tables() {
		ti := checkpoint.TableInfo{Name: t.Name, Dim: int64(t.Dim), Slots: slots}
		for k := range s.c.NumPS() {
			ti.Shards = append(ti.Shards, k)
		}
		m.Tables = append(m.Tables, ti)
		specs = append(specs, &pb.TableSpec{Name: t.Name, Dim: int32(t.Dim), Initializer: t.Init, InitStddev: t.InitStddev,
			Seed: t.Seed, MinCount: t.MinCount, EvictAfterSteps: t.EvictAfterSteps})
	}
	if len(specs) > 0 {
		b, err := json.Marshal(specs)
		if err != nil {
			return m, err
		}
		m.Meta[server.MetaTables] = string(b)
	}
	return m, nil
}
