// Package trainer runs one task of a training job: a ps (RunPS) or a worker
// (RunWorker). A worker connects to every ps, waits for them (logging what
// it waits for), has the chief initialise the variables, then loops: compute
// gradients on its own batch, PushPull them, until the global step reaches
// the goal. The chief then evaluates the final parameters and writes the
// result file; every worker tells the ps it is done, and the ps exit.
package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/paramserv/paramserv/internal/catalog"
	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/replication"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/vfs"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Config is what a worker needs (RunWorker, and RunStandalone, a worker
// with its ps in the process): its life around the training loop
// (lifecycle.Config: the cluster and this task, the chief's choices for
// the ps, the checkpoint schedule, the waits and the log), and the loop's
// own settings. A ps reads PSConfig.
type Config struct {
	lifecycle.Config

	Model string       // "linreg", "mnist"
	Data  model.Config // Worker and NumWorkers are filled in from Cluster

	TrainSteps      int64
	StepsToValidate int64 // 100 if 0
	ResultFile      string
	// ResultRecord, if set, is written into the result file beside the
	// figures as "flags" (what reproduces the run: every training flag) and
	// Version as "version".
	ResultRecord map[string]string
	Version      string

	// Dial, if set, replaces TCP for the worker's connections: the
	// transport seam, through which tests run whole clusters in one
	// process over an in-memory network (package memnet) with faults a
	// kill cannot make.
	Dial func(ctx context.Context, addr string) (net.Conn, error)

	// NewModel, if set, builds the worker's model instead of the built-in
	// one Model names in the catalog (a model of the user's own, run by
	// this loop); Model is then only its name in the log and the result
	// file.
	NewModel func(model.Config) (model.Model, error)

	// WorkerTimeout bounds how long a worker at the goal waits for the
	// chief, and a chief whose data ended for the others; 30m if 0.
	WorkerTimeout time.Duration

	// Overlap says whether a worker overlaps a step's round trip with the
	// next step's compute in asynchronous modes (see overlaps).
	Overlap Overlap
	// Replication replicates each shard on several ps (--replicas).
	Replication Replication
	// IncrementalPull makes a worker's sparse pulls incremental
	// (client.Options.IncrementalPull, --incremental_pull).
	IncrementalPull bool

	// probeAfter and probeTimeout are the client's health checks
	// (client.Options); tests make them small.
	probeAfter, probeTimeout time.Duration
	// statusWait bounds one Status call of the waits at the job's end
	// (waitStatus); statusWaitDefault if 0. Tests make it small.
	statusWait time.Duration
}

// PSConfig is what a ps needs (RunPS): the settings a replicated ps reads
// too (replication.PSConfig: the cluster and this task, the checkpoint
// directory, the replication options, the waits, the log, the transport),
// and those of a ps on its own.
type PSConfig struct {
	replication.PSConfig

	// FS is the filesystem of CheckpointDir (vfs.OS if nil): the ps's
	// shards.
	FS vfs.FS
	// PSWaitForever: the ps never gives up on its workers (see RunPS).
	PSWaitForever bool
	// WorkerTimeout bounds how long a ps waits for a worker not heard from
	// while others have finished; 30m if 0.
	WorkerTimeout time.Duration
	// Tiered gives a ps's sparse tables a disk tier (docs/TIERS.md):
	// TableMemory bytes of rows stay in memory, the rest live on disk in
	// TableDir; EvictUnseen drops rows not pushed for that long.
	Tiered      bool
	TableMemory int64
	TableDir    string
	EvictUnseen time.Duration
	// PSObserver, if set, is told what the ps's server does, and OnServe
	// is called with the server before it serves (metrics, status).
	PSObserver server.Observer
	OnServe    func(*server.Server)
}

// ConfigError marks a configuration the user must fix (exit status 2).
type ConfigError = lifecycle.ConfigError

func (c *Config) defaults() {
	if c.Hook == nil {
		c.Hook = func(event string, step int64) { testHook(event, step) }
	}
	c.Config.Defaults()
	// The chief's Init gives each ps the goal; checkpoints record it.
	c.GoalStep = c.TrainSteps
	if c.StepsToValidate <= 0 {
		c.StepsToValidate = 100
	}
	if c.WorkerTimeout <= 0 {
		c.WorkerTimeout = 30 * time.Minute
	}
	if c.statusWait <= 0 {
		c.statusWait = statusWaitDefault
	}
}

func (c *PSConfig) defaults() {
	c.PSConfig.Defaults()
	if c.WorkerTimeout <= 0 {
		c.WorkerTimeout = 30 * time.Minute
	}
	if c.FS == nil {
		c.FS = vfs.OS
	}
}

// callLog is how a worker's wait for a step's call is logged.
func (cfg *Config) callLog() lifecycle.CallLog {
	return lifecycle.CallLog{Logf: cfg.Logf, Every: cfg.WaitLogEvery, Worker: cfg.Cluster.Task.Index, Sync: cfg.Sync}
}

// testHook is called at the moments a fault test strikes at (see
// lifecycle.Config.Hook). It does nothing outside tests.
var testHook = func(event string, step int64) {}

// retryable reports whether a training step's error is one the worker
// recovers from (lifecycle.Retryable).
func retryable(err error) bool { return lifecycle.Retryable(err) }

// sleepCtx waits d, or until ctx ends (lifecycle.Sleep).
func sleepCtx(ctx context.Context, d time.Duration) error { return lifecycle.Sleep(ctx, d) }

// RunPS serves one ps until every worker is done or ctx ends; a ctx that
// ends first is a *StoppedError. Unless --ps_wait_forever, it never waits
// silently: while workers are missing it says every --wait_log_every what
// it waits for, and gives up (an error, exit 1) on workers never heard
// from after --startup_timeout and on a worker not heard from for
// --worker_timeout while others have finished.
func RunPS(ctx context.Context, cfg PSConfig) error {
	cfg.defaults()
	if cfg.Options.Enabled() {
		if cfg.Tiered {
			cfg.PSConfig.Tiers = copyTiers(cfg)
		}
		if cfg.Ended == nil && !cfg.PSWaitForever {
			// The same watch as below's, asked once a second: every copy
			// knows what the primaries heard of the workers.
			w := newWorkerWatch(cfg, time.Now())
			cfg.Ended = func(s *server.Server) (bool, error) {
				err := w.check(s, time.Now())
				if errors.Is(err, errJobEnded) {
					return true, nil
				}
				return err != nil, err
			}
		}
		return replication.RunPS(ctx, cfg.PSConfig)
	}
	tiers, err := openTier(cfg)
	if err != nil {
		return err
	}
	s := server.New(serverConfig(tiers, server.Config{
		Task:          cfg.Cluster.Task.Index,
		NumPS:         len(cfg.Cluster.Spec.PS),
		NumWorkers:    len(cfg.Cluster.Spec.Workers),
		WaitForever:   cfg.PSWaitForever,
		Logf:          cfg.Logf,
		WaitLogEvery:  cfg.WaitLogEvery,
		CheckpointDir: cfg.CheckpointDir,
		FS:            cfg.FS,
		Observer:      cfg.PSObserver,
		MaxTableKeys:  cfg.MaxTableKeys,
	}))
	if cfg.OnServe != nil {
		cfg.OnServe(s)
	}
	if cfg.CheckpointDir != "" {
		// A second job given a directory another job holds reads nothing
		// of it (issue 12, failure 16): its chief is refused anyway.
		if err := checkpoint.Held(cfg.FS, cfg.CheckpointDir, checkpoint.JobID(cfg.Cluster.Spec.PS, cfg.Cluster.Spec.Workers)); err != nil {
			return &ConfigError{Err: fmt.Errorf("ps %d: %w", cfg.Cluster.Task.Index, err)}
		}
	}
	if _, err := s.RestoreLatest(); err != nil {
		return fmt.Errorf("ps %d: restoring from %s: %w", cfg.Cluster.Task.Index, cfg.CheckpointDir, err)
	}
	if over, final, goal := s.JobOver(); over && final {
		cfg.Logf("ps %d: the restored checkpoint is the job's final one (at its goal step %d): the job is over; this ps exits 0 when stopped, or once every worker has ended (a worker not heard from within --startup_timeout=%s counts as ended)",
			cfg.Cluster.Task.Index, goal, cfg.StartupTimeout)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopTier := func() error { return nil }
	if tiers != nil {
		watchTier(cfg, tiers, s)
		stopTier = runTier(sctx, cfg, tiers, s, cancel)
	}
	defer stopTier()
	var gaveUp error
	watched := make(chan struct{})
	if cfg.PSWaitForever {
		close(watched)
	} else {
		go func() {
			defer close(watched)
			gaveUp = watchWorkers(sctx, cfg, s, time.Now())
			if errors.Is(gaveUp, errJobEnded) {
				gaveUp = nil
				cancel(errJobEnded)
				return
			}
			if gaveUp != nil {
				// The workers waiting on this ps read why it gives up
				// (and stop, naming it) rather than retrying its address
				// until --recovery_timeout once it is gone.
				s.GiveUp(gaveUp)
				cfg.Logf("%v; answering the workers with it for %s before exiting", gaveUp, giveUpGrace)
				_ = sleepCtx(sctx, giveUpGrace)
				cancel(gaveUp)
			}
		}()
	}
	if cfg.Listen != nil {
		lis, lerr := cfg.Listen(cfg.Cluster.Addr())
		if lerr != nil {
			cancel(nil)
			<-watched
			return &ConfigError{Err: &server.ListenError{Addr: cfg.Cluster.Addr(), Err: lerr}}
		}
		err = server.ServeListener(sctx, lis, s)
	} else {
		err = server.Serve(sctx, cfg.Cluster.Addr(), s)
	}
	cancel(nil)
	<-watched
	if terr := stopTier(); terr != nil {
		return terr
	}
	var le *server.ListenError
	if errors.As(err, &le) {
		return &ConfigError{Err: err}
	}
	if err == nil && gaveUp != nil && ctx.Err() == nil {
		return gaveUp
	}
	if err == nil && ctx.Err() != nil {
		// Stopped from outside (SIGTERM): a success only if every worker
		// had finished, or the job was over before this ps started (it
		// restored the final checkpoint: the workers told the ps before
		// it, and `local` stops it so once they have all exited 0).
		over, final, goal := s.JobOver()
		select {
		case <-s.AllDone():
		default:
			if over && final {
				cfg.Logf("ps %d: stopped (%v); the job was over: this ps restored the final checkpoint, at the goal step %d", cfg.Cluster.Task.Index, context.Cause(ctx), goal)
				return nil
			}
			st, _ := s.Status(context.Background(), nil) // Status reads no field of its request
			return &StoppedError{Task: cfg.Cluster.Task.Index, Cause: context.Cause(ctx),
				Step: st.GetGlobalStep(), Done: int(st.GetWorkersDone()), Workers: len(cfg.Cluster.Spec.Workers)}
		}
	}
	return err
}

// giveUpGrace is how long a ps that gave up on the job keeps answering
// its workers with the reason before it exits (as a replicated ps does).
const giveUpGrace = replication.GiveUpGrace

// StoppedError is RunPS's error when its context ended (a SIGTERM) before
// every worker had finished: the job is not done, so the ps did not succeed.
type StoppedError = server.StoppedError

// errJobEnded is watchWorkers' word that every worker has ended and the
// job succeeded though not every worker called Done: the ps exits 0.
var errJobEnded = errors.New("the job has ended")

// goneAfter is how long a worker is silent, once the job reached its goal,
// before the ps counts it as gone. A worker still there is heard from far
// more often: it pushes, polls Status while it lingers for the chief, and
// the chief polls while it evaluates.
const goneAfter = 5 * time.Second

// jobEnd decides whether every worker has ended, some not by Done (the
// case of every worker done is the server's own): each worker is done,
// gave up (and was not heard from since), or is gone, that is silent for
// goneAfter (never heard from: for --startup_timeout since started) once
// this ps knows the job reached its goal (over; see server.JobOver). A
// worker that may still come back, the goal not reached, is not gone. ok
// says the job succeeded: it reached its goal and the chief finished it,
// or the ps restored the job's final checkpoint (final). how names who
// ended how.
func jobEnd(n int, done []int, lastSeen map[int]time.Time, gaveUp map[int]server.GaveUp, over, final bool, started, now time.Time, startupTimeout time.Duration) (ended, ok bool, how string) {
	var parts []string
	notDone := false
	for w := range n {
		t, heard := lastSeen[w]
		g, gave := gaveUp[w]
		switch {
		case slices.Contains(done, w):
			parts = append(parts, fmt.Sprintf("worker %d done", w))
		case gave && (!heard || !t.After(g.At)):
			parts = append(parts, fmt.Sprintf("worker %d gave up (%s)", w, g.Why))
			notDone = true
		case over && heard && now.Sub(t) >= goneAfter:
			parts = append(parts, fmt.Sprintf("worker %d gone after the goal (last heard %s ago)", w, now.Sub(t).Round(time.Second)))
			notDone = true
		case over && !heard && now.Sub(started) >= startupTimeout:
			parts = append(parts, fmt.Sprintf("worker %d never heard from (the job was over)", w))
			notDone = true
		default:
			return false, false, ""
		}
	}
	ok = over && (final || slices.Contains(done, 0))
	return notDone, ok, strings.Join(parts, ", ")
}

// watchWorkers is a ps's watch over its workers (see RunPS): it returns
// nil when ctx ends or every worker is done, errJobEnded when every worker
// has ended, some not by Done, and the job succeeded (jobEnd), and an
// error naming who is missing, or who ended how, when it gives up.
// started is when the ps started.
func watchWorkers(ctx context.Context, cfg PSConfig, s *server.Server, started time.Time) error {
	tick := time.NewTicker(min(cfg.WaitLogEvery, time.Second))
	defer tick.Stop()
	w := newWorkerWatch(cfg, started)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.AllDone():
			return nil
		case <-tick.C:
		}
		if err := w.check(s, time.Now()); err != nil {
			return err
		}
	}
}

// workerWatch is one ps's watch over its workers, a look at a time
// (check): a ps on its own looks at its server (watchWorkers), a ps with
// replicated shards at its copy of its own shard, which knows what the
// shard's primaries heard (replication.PSConfig.Ended). It is used by one
// goroutine.
type workerWatch struct {
	cfg     PSConfig
	started time.Time // when the ps started
	lastLog time.Time
}

func newWorkerWatch(cfg PSConfig, started time.Time) *workerWatch {
	return &workerWatch{cfg: cfg, started: started, lastLog: started} // a first line after --wait_log_every
}

// check looks at s at now: nil to go on (logging, every --wait_log_every,
// what it waits for), errJobEnded when every worker has ended, some not by
// Done, and the job succeeded (jobEnd), and an error naming who is
// missing, or who ended how, when the ps gives up: on workers never heard
// from after --startup_timeout, and on a worker not heard from for
// --worker_timeout while others have finished.
func (w *workerWatch) check(s *server.Server, now time.Time) error {
	cfg := w.cfg
	ps, n := cfg.Cluster.Task.Index, len(cfg.Cluster.Spec.Workers)
	done, lastSeen := s.WorkerActivity()
	if len(done) == n {
		return nil // every worker done: the ps's own end
	}
	over, final, goal := s.JobOver()
	if ended, ok, how := jobEnd(n, done, lastSeen, s.WorkersGaveUp(), over, final, w.started, now, cfg.StartupTimeout); ended {
		if ok {
			cfg.Logf("ps %d: every worker has ended and the job reached its goal step %d: %s; shutting down", ps, goal, how)
			return errJobEnded
		}
		if over {
			return fmt.Errorf("ps %d: every worker has ended, the goal step %d reached but the chief did not finish the job: %s", ps, goal, how)
		}
		return fmt.Errorf("ps %d: every worker has ended before the job's goal: %s", ps, how)
	}
	var never, vanished []int
	var heard []string
	quiet := true // every missing worker was heard from within --wait_log_every
	for wk := range n {
		if slices.Contains(done, wk) {
			continue
		}
		t, ok := lastSeen[wk]
		switch {
		case !ok:
			never = append(never, wk)
			quiet = false
		default:
			ago := now.Sub(t)
			heard = append(heard, fmt.Sprintf("last heard from worker %d %s ago", wk, ago.Round(time.Second)))
			if ago >= cfg.WaitLogEvery {
				quiet = false
			}
			if len(done) > 0 && ago >= cfg.WorkerTimeout {
				vanished = append(vanished, wk)
			}
		}
	}
	if len(vanished) > 0 {
		return fmt.Errorf("ps %d: gave up on workers %v: not heard from for --worker_timeout=%s while workers %v have finished (%d of %d done)",
			ps, vanished, cfg.WorkerTimeout, done, len(done), n)
	}
	if len(never) > 0 && now.Sub(w.started) >= cfg.StartupTimeout && !(over && final) {
		// (A ps that restored the job's final checkpoint counts a
		// worker never heard from as ended: jobEnd.)
		return fmt.Errorf("ps %d: gave up after --startup_timeout=%s: never heard from workers %v (%d of %d done)",
			ps, cfg.StartupTimeout, never, len(done), n)
	}
	// Training with every worker pushing is no wait worth a line; one
	// that finished with others missing, or a worker silent or never
	// seen, is.
	if (len(done) == 0 && quiet) || now.Sub(w.lastLog) < cfg.WaitLogEvery {
		return nil
	}
	what := heard
	if len(never) > 0 {
		what = append(what, fmt.Sprintf("never heard from workers %v", never))
	}
	cfg.Logf("ps %d: waiting for workers %v to finish (%d of %d done; %s)", ps, missingWorkers(n, done), len(done), n, strings.Join(what, "; "))
	w.lastLog = now
	return nil
}

// missingWorkers lists the workers 0..n-1 not in done.
func missingWorkers(n int, done []int) []int {
	var out []int
	for w := range n {
		if !slices.Contains(done, w) {
			out = append(out, w)
		}
	}
	return out
}

// Result is what the chief writes to --result_file.
type Result struct {
	Model               string  `json:"model"`
	Mode                string  `json:"mode"`
	GlobalStep          int64   `json:"global_step"`
	LocalSteps          int64   `json:"local_steps"`
	ElapsedS            float64 `json:"elapsed_s"`
	StaleDropped        int64   `json:"stale_dropped"`
	RejectedPushes      int64   `json:"rejected_pushes"`
	Loss                float64 `json:"loss"`
	TrainLoss           float64 `json:"train_loss"`
	Workers             int     `json:"workers"`
	PS                  int     `json:"ps"`
	ReplicasToAggregate int     `json:"replicas_to_aggregate,omitempty"`
	Optimizer           string  `json:"optimizer"`
	LearningRate        float64 `json:"learning_rate"`
	// ExamplesPerS is the job's rate: every worker's examples (the pushes
	// ps 0 received, applied or dropped, times the batch size) over the
	// chief's training wall time. ChiefExamplesPerS is the chief's own:
	// its local steps times the batch size over the same time.
	ExamplesPerS      float64 `json:"examples_per_s"`
	ChiefExamplesPerS float64 `json:"chief_examples_per_s"`
	BatchSize         int     `json:"batch_size"`
	TrainingS         float64 `json:"training_s"`
	// TrainingCPUS is the chief's process's CPU time (user and system)
	// over TrainingS: with --standalone, the whole training's; in a
	// cluster, the chief's share only (not the ps's or other workers').
	TrainingCPUS    float64            `json:"training_cpu_s,omitempty"`
	ComputeS        float64            `json:"compute_s"`
	PushPullS       float64            `json:"push_pull_s"`
	Metrics         map[string]float64 `json:"metrics"`
	Weight          *float64           `json:"weight,omitempty"`
	Bias            *float64           `json:"bias,omitempty"`
	ValCrossEntropy *float64           `json:"val_cross_entropy,omitempty"`
	ValAccuracy     *float64           `json:"val_accuracy,omitempty"`
	TestAccuracy    *float64           `json:"test_accuracy,omitempty"`
	TestLogLoss     *float64           `json:"test_log_loss,omitempty"`
	TestAUC         *float64           `json:"test_auc,omitempty"`
	Tables          []TableShard       `json:"tables,omitempty"`
	Version         string             `json:"version,omitempty"`
	Flags           map[string]string  `json:"flags,omitempty"`
	Standalone      bool               `json:"standalone,omitempty"` // trained by RunStandalone: no ps
}

// TableShard is one sparse table's state on one ps at the end.
type TableShard struct {
	PS                  int    `json:"ps"`
	Name                string `json:"name"`
	Rows                int64  `json:"rows"`
	Bytes               int64  `json:"bytes"`
	Admitted            int64  `json:"admitted"`
	Evicted             int64  `json:"evicted"`
	RejectedByAdmission int64  `json:"rejected_by_admission"`
}

// RunWorker trains until the global step reaches cfg.TrainSteps.
func RunWorker(ctx context.Context, cfg Config) error {
	err := runWorker(ctx, cfg)
	var ce *ConfigError
	if (errors.Is(err, client.ErrLayout) || errors.Is(err, client.ErrVersion)) && !errors.As(err, &ce) {
		// Another model or paramserv version on the ps: not a ps to wait
		// for, an input to fix.
		return &ConfigError{Err: err}
	}
	return err
}

func runWorker(ctx context.Context, cfg Config) (err error) {
	cfg.defaults()
	start := time.Now()
	worker := cfg.Cluster.Task.Index
	// The chief locks its checkpoint directory first: one job per
	// directory (issue 12, failure 16).
	lw, err := lifecycle.New(cfg.Config)
	if err != nil {
		return err
	}
	defer lw.Close()
	numWorkers := len(cfg.Cluster.Spec.Workers)
	m, err := workerModel(cfg)
	if err != nil {
		return err
	}
	sm, isSparse := m.(model.SparseModel)
	var tables []model.Table
	if isSparse {
		tables = sm.Tables()
	}
	if err := replicatedWorker(&cfg, isSparse); err != nil {
		return err
	}
	c, err := client.New(cfg.Cluster.Spec.PS, m.Variables(), client.Options{
		Worker: worker, SplitBytes: cfg.SplitBytes, Logf: cfg.Logf, WaitLogEvery: cfg.WaitLogEvery, Tables: tables,
		Dial:       cfg.Dial,
		ProbeAfter: cfg.probeAfter, ProbeTimeout: cfg.probeTimeout,
		IncrementalPull: cfg.IncrementalPull,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	defer func() {
		if err != nil && ctx.Err() == nil {
			tellGaveUp(cfg, c, err)
		}
	}()

	if err := lw.Start(ctx, c, m.Variables(), func() model.Params { return m.Init(cfg.Data.Seed) }); err != nil {
		return err
	}
	if cfg.Cluster.IsChief() {
		// The chief's final checkpoint and evaluation may keep it from
		// the ps for longer than goneAfter: it says it is there.
		defer keepHeard(ctx, c)()
	}
	if c.IsSync() != cfg.Sync {
		// A restored checkpoint keeps its mode: the cluster's wins.
		cfg.Logf("worker %d: warning: the ps train %s (restored from a checkpoint), --sync_replicas says %s; going on %s",
			worker, modeName(c.IsSync()), modeName(cfg.Sync), modeName(c.IsSync()))
		cfg.Sync = c.IsSync()
		lw.SetSync(cfg.Sync)
	}

	params := model.NewParams(m.Variables())
	trainStart, trainCPU := time.Now(), processCPU()
	var st loopStats
	if cfg.Sync && !cfg.Replication.Enabled() {
		st.restarted = c.CheckIncarnations
	}
	if err := trainToGoal(ctx, cfg, c, lw, m, params, &st); err != nil {
		return err
	}
	step, local, dropped, loss, computeT, commT := st.step, st.local, st.dropped, st.loss, st.compute, st.comm
	elapsed, cpu := time.Since(trainStart), processCPU()-trainCPU
	localRate := float64(local) * float64(max(cfg.Data.BatchSize, 1)) / elapsed.Seconds()
	cfg.Logf("worker %d: finished at global step %d after %d local steps (%d of its pushes dropped as stale), %.0f examples/s of its own", worker, step, local, dropped, localRate)
	cfg.Logf("Training elapsed time: %.1f s", elapsed.Seconds())

	if cfg.Cluster.IsChief() {
		endTraining(m)
		if err := finish(ctx, cfg, c, m, params, st.goalSteps, Result{
			Model: cfg.Model, LocalSteps: local, TrainLoss: loss, Workers: numWorkers, PS: c.NumPS(),
			Optimizer: cfg.Optimizer.Name, LearningRate: cfg.Optimizer.LearningRate,
			ElapsedS: time.Since(start).Seconds(), ComputeS: computeT.Seconds(), PushPullS: commT.Seconds(),
			ChiefExamplesPerS: localRate, BatchSize: max(cfg.Data.BatchSize, 1), TrainingS: elapsed.Seconds(),
			TrainingCPUS: cpu.Seconds(), Version: cfg.Version, Flags: cfg.ResultRecord,
		}); err != nil {
			return err
		}
	}
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	if err := c.Done(dctx); err != nil {
		cfg.Logf("worker %d: could not tell every ps it is done (they may not exit by themselves): %v", worker, err)
	}
	return nil
}

// keepHeard has the worker call Status on every ps once a second until
// the returned stop is called, so that each ps hears from it (a Status
// call names its worker) while it works without calling them.
func keepHeard(ctx context.Context, c *client.Client) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sleepCtx(ctx, time.Second) == nil {
			sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
			_, _ = c.Status(sctx) // a ps that does not answer is the loop's to handle
			scancel()
		}
	}()
	return func() { cancel(); <-done }
}

// gaveUpWait bounds a worker's word to the ps that it gave up.
const gaveUpWait = 5 * time.Second

// tellGaveUp tells every ps the worker can reach that it gave up on the
// job with err (not a stop from outside: a worker stopped by a signal may
// come back), so that a ps whose workers have all ended exits rather than
// wait for this one.
func tellGaveUp(cfg Config, c *client.Client, err error) {
	why := err.Error()
	if len(why) > 300 {
		why = why[:300] + "..."
	}
	ctx, cancel := context.WithTimeout(context.Background(), gaveUpWait)
	defer cancel()
	if missed := c.GaveUp(ctx, why); len(missed) > 0 {
		cfg.Logf("worker %d: could not tell ps %v it gave up (told the others)", cfg.Cluster.Task.Index, missed)
	}
}

// workerModel builds the worker's model (cfg.NewModel's, or the built-in
// one cfg.Model names) and checks the settings it trains with; errors are
// the user's to fix.
func workerModel(cfg Config) (model.Model, error) {
	numWorkers := len(cfg.Cluster.Spec.Workers)
	data := cfg.Data
	data.Worker, data.NumWorkers = cfg.Cluster.Task.Index, numWorkers
	if data.Logf == nil {
		data.Logf = cfg.Logf
	}
	newModel := func(c model.Config) (model.Model, error) { return catalog.New(cfg.Model, c) }
	if cfg.NewModel != nil {
		newModel = cfg.NewModel
	}
	m, err := newModel(data)
	if err != nil {
		return nil, &ConfigError{Err: err}
	}
	if err := CheckEpochs(cfg); err != nil {
		return nil, &ConfigError{Err: err}
	}
	if cfg.Sync && cfg.ReplicasToAggregate > numWorkers {
		return nil, &ConfigError{Err: fmt.Errorf("--replicas_to_aggregate=%d is more than the %d workers", cfg.ReplicasToAggregate, numWorkers)}
	}
	return m, nil
}

// trainToGoal runs the training loop until the global step reaches the
// goal (or the worker's data ends), the chief's final checkpoint saved;
// after a failure it recovers (lw) and runs the loop again from the
// cluster's step.
func trainToGoal(ctx context.Context, cfg Config, c *client.Client, lw *lifecycle.Worker, m model.Model, params model.Params, st *loopStats) error {
	worker, numWorkers := cfg.Cluster.Task.Index, len(cfg.Cluster.Spec.Workers)
	for {
		// A loop starts with a pull, so after a recovery it goes on from
		// whatever step the cluster is at.
		var err error
		if sm, isSparse := m.(model.SparseModel); isSparse {
			err = sparseLoop(ctx, cfg, c, sm, params, lw, st, overlaps(cfg, numWorkers))
		} else {
			err = denseLoop(ctx, cfg, c, m, params, lw, st, overlaps(cfg, numWorkers))
		}
		if err == nil && st.ended && cfg.Cluster.IsChief() && numWorkers > 1 {
			// The chief's data ended: the result is the job's once the
			// others have trained theirs.
			err = waitForWorkers(ctx, cfg, c)
		}
		if err == nil && cfg.Cluster.IsChief() {
			// The final checkpoint and the evaluation (finish) must read
			// the same parameters: wait until no ps takes another push.
			st.goalSteps, err = waitPSAtGoal(ctx, cfg, c)
		}
		if err == nil {
			// A ps that dies during the final checkpoint restores an
			// older one: recovery rolls the cluster back to it, and the
			// loop trains up to the goal again.
			if err = lw.SaveAt(ctx, st.step); err != nil {
				err = fmt.Errorf("final checkpoint: %w", err)
			}
		}
		if err == nil && staysForChief(cfg) && !st.ended {
			// (A worker whose data ended has nothing to train again
			// after a roll back: it leaves at once, and the chief, which
			// waits for it (waitForWorkers), goes on.)
			// Wait for the chief before leaving: if a ps fails its final
			// checkpoint, the cluster rolls back and the synchronous steps
			// since need this worker again.
			var again bool
			if again, err = waitForChief(ctx, cfg, c); err == nil && again {
				err = fmt.Errorf("%w: the ps went back below step %d (a ps restored a checkpoint); training again", client.ErrNotReady, cfg.TrainSteps)
			}
		}
		if err == nil {
			break
		}
		if !retryable(err) || ctx.Err() != nil {
			return fmt.Errorf("worker %d: %w", worker, err)
		}
		cfg.Observer.Recovery(err)
		if err := lw.Pause(ctx, st.step, err); err != nil {
			return fmt.Errorf("worker %d: %w", worker, err)
		}
		if err := lw.Rejoin(ctx, st.step, err); err != nil {
			return err
		}
	}
	return nil
}

// staysForChief reports whether a worker that reached the goal waits for
// the chief before it leaves: another worker in synchronous mode, where the
// chief alone cannot complete a step; and any other worker of a job with
// checkpoints, since a ps that restarts after the worker left would
// restore an older step and wait for that worker's Done, which it no
// longer remembers, while the worker can still train the lost steps.
func staysForChief(cfg Config) bool {
	return !cfg.Cluster.IsChief() && ((cfg.Sync && cfg.ReplicasToAggregate > 1) || cfg.CheckpointDir != "")
}

// waitForChief is the wait of a worker that stays for the chief: until the
// chief has told a ps it is done (it has saved the final checkpoint; the chief is
// the first to call Done, as every other worker waits for it), or a ps is
// back below the goal (again: it restored an older checkpoint, the worker
// must train again), or a ps restored a checkpoint at the goal (the job's
// final one: the job is over), or --worker_timeout passes (the chief is gone; the
// worker's own work is done). A ps that restarted at the goal changes
// nothing; one that does not answer is waited for. It logs every
// --wait_log_every.
func waitForChief(ctx context.Context, cfg Config, c *client.Client) (again bool, err error) {
	worker := cfg.Cluster.Task.Index
	start := time.Now()
	lastLog := start
	for {
		statuses, waitingFor, err := waitStatus(ctx, cfg, c)
		switch {
		case err != nil:
			return false, err
		case statuses != nil:
			for _, st := range statuses {
				if st.WorkersDone > 0 {
					return false, nil
				}
				if st.Initialized && st.RestoredStep >= cfg.TrainSteps && st.GlobalStep >= cfg.TrainSteps {
					// The ps restored a checkpoint at the goal: the job's
					// final one, saved by the chief, which then called
					// Done on a ps that is gone (this worker was started
					// again after the job ended).
					cfg.Logf("worker %d: at the goal; ps %d restored the job's final checkpoint (step %d): the job is over", worker, st.Task, st.RestoredStep)
					return false, nil
				}
			}
			for _, st := range statuses {
				if st.Initialized && st.GlobalStep < cfg.TrainSteps {
					return true, nil
				}
			}
			waitingFor = "the chief to save the final checkpoint"
		}
		if time.Since(start) >= cfg.WorkerTimeout {
			cfg.Logf("worker %d: at the goal, waited --worker_timeout=%s for %s; leaving", worker, cfg.WorkerTimeout, waitingFor)
			return false, nil
		}
		if time.Since(lastLog) >= cfg.WaitLogEvery {
			cfg.Logf("worker %d: at the goal; waiting for %s (waited %s; a synchronous cluster rolled back would need this worker)",
				worker, waitingFor, time.Since(start).Round(time.Second))
			lastLog = time.Now()
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return false, err
		}
	}
}

// statusWaitDefault bounds one Status call of the waits at the job's end.
const statusWaitDefault = 10 * time.Second

// waitStatus is one Status call of a wait at the job's end (waitForChief,
// waitForWorkers), bounded by cfg.statusWait. A ps that does not answer
// within it is slow, not failed: it answers its requests under one lock,
// and one pull of the chief's final evaluation (262,144 keys, from a
// table mostly on disk) can hold that lock for longer. So a call
// past its bound, like a retryable error, gives no statuses and what the
// wait waits for (a ps to answer): the wait asks again, logs, and stays
// bounded by its own limit. err is an error no wait outlasts (ctx ended,
// another layout).
func waitStatus(ctx context.Context, cfg Config, c *client.Client) (statuses []*pb.StatusResponse, waitingFor string, err error) {
	sctx, cancel := context.WithTimeout(ctx, cfg.statusWait)
	defer cancel()
	statuses, err = c.Status(sctx)
	switch {
	case err == nil:
		return statuses, "", nil
	case ctx.Err() == nil && (sctx.Err() != nil || client.IsDeadline(err)):
		// (The ps may end the call on its deadline, as gRPC passes it,
		// before sctx ends here.)
		return nil, fmt.Sprintf("a ps to answer (none in %s: a ps answers its requests under one lock, and a long one, such as a pull of the chief's final evaluation from a disk tier, holds up the others)", cfg.statusWait), nil
	case ctx.Err() == nil && retryable(err):
		return nil, fmt.Sprintf("a ps to answer (%v)", err), nil
	}
	return nil, "", err
}

// CheckEpochs refuses --epochs with synchronous training of several
// workers that could hang: a worker whose data ends stops pushing, so a
// step the others push after that completes only when --sync_timeout
// passes and the ps proceeds without it. Equal parts end on the same step
// and never wait; unequal ones finish their extra steps one timeout each.
func CheckEpochs(cfg Config) error {
	numWorkers := len(cfg.Cluster.Spec.Workers)
	if cfg.Data.Epochs <= 0 || !cfg.Sync || numWorkers <= 1 {
		return nil
	}
	if !cfg.SyncProceed || cfg.SyncTimeout <= 0 {
		return fmt.Errorf("--epochs=%d with --sync_replicas and %d workers needs --sync_on_timeout=proceed and a --sync_timeout (have %s, %s): a worker whose data ends stops pushing, and the synchronous steps of the others then complete only when the ps proceed without it",
			cfg.Data.Epochs, numWorkers, map[bool]string{true: "proceed", false: "fail"}[cfg.SyncProceed], cfg.SyncTimeout)
	}
	return nil
}

// waitForWorkers is the wait of a chief whose data ended (--epochs) while
// other workers may still train theirs: until every other worker has told
// a ps it is done (its data ended, or it reached the goal and left), or a
// ps is at the goal (the workers still there linger for the chief), or
// --worker_timeout passes. A ps that does not answer is waited for. It
// logs every --wait_log_every.
func waitForWorkers(ctx context.Context, cfg Config, c *client.Client) error {
	others := len(cfg.Cluster.Spec.Workers) - 1
	start := time.Now()
	lastLog := start
	for {
		statuses, waitingFor, err := waitStatus(ctx, cfg, c)
		switch {
		case err != nil:
			return err
		case statuses != nil:
			done := 0
			for _, st := range statuses {
				if st.Initialized && st.GlobalStep >= cfg.TrainSteps {
					return nil
				}
				done = max(done, int(st.WorkersDone))
			}
			if done >= others {
				return nil
			}
			waitingFor = fmt.Sprintf("the other workers to end their data (%d of %d done, global step %d)", done, others, statuses[0].GlobalStep)
		}
		if time.Since(start) >= cfg.WorkerTimeout {
			cfg.Logf("chief: data ended, waited --worker_timeout=%s for %s; going on", cfg.WorkerTimeout, waitingFor)
			return nil
		}
		if time.Since(lastLog) >= cfg.WaitLogEvery {
			cfg.Logf("chief: data ended; waiting for %s (waited %s)", waitingFor, time.Since(start).Round(time.Second))
			lastLog = time.Now()
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// goalStallMin is the least the chief waits at the goal for a ps below it
// that stopped moving: an asynchronous push in flight lands within it.
const goalStallMin = 10 * time.Second

// goalStall is how long the chief waits at the goal for a ps below it that
// stopped moving, and why that long: as long as the job's settings let a
// push that still counts be on its way. A synchronous ps below the goal
// waits for a gradient, and completes (or fails) its step once
// --sync_timeout passes (with none, the workers wait --recovery_timeout
// for the cluster); with --replicas a push is acknowledged once every live
// copy holds it, a copy silent for --failover_timeout left out; otherwise
// an asynchronous push in flight lands within goalStallMin. Past that, the
// pushes the ps misses were lost (their worker died mid-push, or the ps
// refused them), and no worker that has seen the goal pushes again: the
// parameters stand still.
func goalStall(cfg Config) (time.Duration, string) {
	switch {
	case cfg.Sync && cfg.SyncTimeout > 0:
		return cfg.SyncTimeout + goalStallMin, fmt.Sprintf("--sync_timeout=%s, for a synchronous step's last gradients, and %s", cfg.SyncTimeout, goalStallMin)
	case cfg.Sync:
		return cfg.RecoveryTimeout, fmt.Sprintf("--recovery_timeout=%s (--sync_timeout=0: a synchronous step waits for its gradients for ever)", cfg.RecoveryTimeout)
	case cfg.Replication.Enabled() && 2*cfg.Replication.FailoverTimeout > goalStallMin:
		return 2 * cfg.Replication.FailoverTimeout, fmt.Sprintf("twice --failover_timeout=%s, for a push's copies", cfg.Replication.FailoverTimeout)
	}
	return goalStallMin, fmt.Sprintf("%s, for an asynchronous push in flight", goalStallMin)
}

// waitPSAtGoal is the chief's wait, once it has reached the goal, until
// every ps is there too. Asynchronous ps count their own steps, and the
// chief sees ps 0's: another ps may still apply pushes in flight. Each ps
// drops the pushes past the goal (the goal step of the chief's Init), so
// once all are there the parameters stand still, and the final checkpoint
// and the evaluation read the same ones. It returns at once when no ps is
// at the goal (the workers' data ended first: they no longer push), and
// when the ps below it did not move for goalStall (their missing pushes
// were lost), saying so. It returns the ps's steps then (finish checks
// that none moved by the evaluation). It logs every --wait_log_every.
func waitPSAtGoal(ctx context.Context, cfg Config, c *client.Client) ([]int64, error) {
	if cfg.TrainSteps <= 0 {
		return nil, nil
	}
	stall, why := goalStall(cfg)
	start := time.Now()
	lastLog, lastMove := start, start
	var last []int64
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		statuses, err := c.Status(sctx)
		cancel()
		if err != nil {
			return nil, err // the caller recovers and comes back here
		}
		steps := make([]int64, len(statuses))
		reached, behind := false, []string(nil)
		for i, st := range statuses {
			steps[i] = st.GlobalStep
			if st.GlobalStep >= cfg.TrainSteps {
				reached = true
			} else {
				behind = append(behind, fmt.Sprintf("ps %d at step %d", i, st.GlobalStep))
			}
		}
		if !reached || len(behind) == 0 {
			return steps, nil
		}
		if !slices.Equal(steps, last) {
			last, lastMove = steps, time.Now()
		}
		if time.Since(lastMove) >= stall {
			cfg.Logf("chief: at the goal step %d, %s did not move for %s (%s): the pushes they miss were lost (a worker that died mid-push, or pushes they refused), and no worker at the goal pushes again; saving and evaluating the parameters as they stand",
				cfg.TrainSteps, strings.Join(behind, ", "), stall, why)
			return steps, nil
		}
		if time.Since(lastLog) >= cfg.WaitLogEvery {
			cfg.Logf("chief: at the goal step %d; waiting for %s to apply the pushes in flight (waited %s; going on once they stand still for %s: %s)",
				cfg.TrainSteps, strings.Join(behind, ", "), time.Since(start).Round(time.Second), stall, why)
			lastLog = time.Now()
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

func modeName(sync bool) string {
	if sync {
		return "synchronously"
	}
	return "asynchronously"
}

// loopStats is what a training loop reports.
type loopStats struct {
	step, local, dropped int64
	loss                 float64
	compute, comm        time.Duration
	lastCompute          time.Duration // the last step's computing
	// lookup reads rows from the ps for a sparse model's validation (set
	// by sparseLoop).
	lookup func(t int, keys []uint64, out []float32) error
	// ended: the loop stopped because the worker's data ended (--epochs),
	// not at the goal.
	ended bool
	// goalSteps: the chief's, each ps's step when it saved the final
	// checkpoint (waitPSAtGoal); finish checks that none moved since.
	goalSteps []int64
	// restarted, if set, reports a *client.RestartedError if a ps
	// restarted since the worker last saw it: a synchronous step that
	// waits asks it (see lifecycle.RestartWatch).
	restarted func(ctx context.Context) error
	// held: what a sparse loop that ended with an error (a recovery
	// follows) had read and not sent; the next loop trains it first.
	held heldBatches
}

// heldBatches are the batches a sparse loop read from the model and did
// not push before a failure. After the recovery the loop computes them at
// the restored values before it reads more, so that no batch of the data
// is skipped (it matters with --epochs); the model still holds them, since
// NextBatch was not called since. A batch whose push was sent when the
// call failed is not sent again: like every push since the checkpoint the
// recovery restored, it is not in the cluster's history any more, and the
// data is not rewound to the checkpoint.
type heldBatches struct {
	keys  [][][]uint64 // oldest first
	ended bool         // NextBatch returned ErrEndOfData after them
	// The gradients of a batch computed and not sent (the overlap loop
	// computes batch t before the call of batch t-1 lands): pushed after
	// the recovery as they are (nil: none).
	grads model.Params
	rows  []client.Rows
}

// batchQueue hands a sparse loop its batches: first those st.held, then
// the model's. It tracks the batches read and not yet sent, for hold.
type batchQueue struct {
	m      model.SparseModel
	held   heldBatches
	unsent [][][]uint64
}

func newBatchQueue(m model.SparseModel, st *loopStats) *batchQueue {
	q := &batchQueue{m: m, held: st.held}
	st.held = heldBatches{}
	return q
}

// next returns the next batch's keys, or model.ErrEndOfData.
func (q *batchQueue) next() ([][]uint64, error) {
	var keys [][]uint64
	switch {
	case len(q.held.keys) > 0:
		keys, q.held.keys = q.held.keys[0], q.held.keys[1:]
	case q.held.ended:
		return nil, model.ErrEndOfData
	default:
		var err error
		if keys, err = q.m.NextBatch(); err != nil {
			q.held.ended = errors.Is(err, model.ErrEndOfData)
			return nil, err
		}
	}
	q.unsent = append(q.unsent, keys)
	return keys, nil
}

// sent marks the oldest batch read as sent.
func (q *batchQueue) sent() { q.unsent = q.unsent[1:] }

// hold keeps in st what the loop had not sent when it failed with err
// (computed: the oldest batch's gradients, grads and rows, were computed
// and not sent), and returns err.
func (q *batchQueue) hold(st *loopStats, err error, computed bool, grads model.Params, rows []client.Rows) error {
	h := heldBatches{keys: q.unsent, ended: q.held.ended, grads: q.held.grads, rows: q.held.rows}
	if computed {
		h.keys, h.grads, h.rows = q.unsent[1:], grads, rows
	}
	st.held = h
	return err
}

// denseLoop trains a dense model: compute gradients, PushPull, repeat.
// With overlap (asynchronous modes, see overlaps) the round trip of one
// step runs while the next is computed: see overlapLoop.
func denseLoop(ctx context.Context, cfg Config, c psClient, m model.Model, params model.Params, lw *lifecycle.Worker, st *loopStats, overlap bool) error {
	if overlap {
		return overlapLoop(ctx, cfg, c, m, params, lw, st)
	}
	grads := model.NewParams(m.Variables())
	step, err := c.Pull(ctx, 0, params)
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	st.step = step
	for step < cfg.TrainSteps {
		t0 := time.Now()
		st.loss, err = m.ComputeGradients(params, grads)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		st.lastCompute = time.Since(t0)
		st.compute += st.lastCompute
		step, err = st.exchange(ctx, cfg, m, params, lw, step, func(ctx context.Context, minStep int64) *client.Call {
			return c.PushPullAsync(ctx, step, grads, minStep, params)
		})
		if err != nil && cfg.Replication.Enabled() {
			step, err = resendAfterFailover(ctx, cfg, step, err, func(rctx context.Context) (int64, error) {
				return st.exchange(rctx, cfg, m, params, lw, step, func(ctx context.Context, minStep int64) *client.Call {
					return c.PushPullAsync(ctx, step, grads, minStep, params)
				})
			})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Overlap is the choice of Config.Overlap.
type Overlap int

const (
	// OverlapAuto overlaps when there is one worker: the gradients are then
	// one step staler, which left MNIST's accuracy at 2,000 steps within
	// the spread of seeds; with two workers they are three steps staler
	// (their own last push and two of the other's), which cost 1.7 points.
	OverlapAuto Overlap = iota
	// OverlapOn overlaps whatever the number of workers.
	OverlapOn
	// OverlapOff never overlaps.
	OverlapOff
)

// overlaps reports whether a worker overlaps its round trips with its
// compute: only in asynchronous mode, where a gradient may be computed at
// parameters that miss the newest updates (synchronous mode computes a step
// at the parameters of the step before). The overlap makes each gradient
// one round of pushes staler (its own previous push and the other
// workers' of one step), so under --max_staleness it is used only when the
// bound leaves room for that: 2*workers-1 steps, twice what the workers
// pushing in turn make without it. See Overlap for the default.
func overlaps(cfg Config, numWorkers int) bool {
	switch {
	case cfg.Sync || cfg.Overlap == OverlapOff:
		return false
	case cfg.Replication.Enabled():
		// A step resent after a failover must be the same push; the
		// overlap's two pushes in flight are not resent (REPLICATION.md).
		return false
	case cfg.MaxStaleness > 0 && cfg.MaxStaleness < int64(2*numWorkers-1):
		return false
	}
	return cfg.Overlap == OverlapOn || numWorkers == 1
}

// overlapLoop is denseLoop with the round trip of step t (push its
// gradients, pull the parameters for the step after) in flight while step
// t+1 is computed at the parameters that last landed. It keeps two sets of
// parameters and of gradients: the call in flight writes one set of
// parameters and reads one of gradients while the model reads and writes
// the others. A step's gradients are pushed tagged with the global step of
// the parameters they were computed at, so the ps counts their staleness.
// The gradients computed while the goal was reached are not pushed.
// st.comm counts only the time the worker waited for a call to land.
func overlapLoop(ctx context.Context, cfg Config, c psClient, m model.Model, params model.Params, lw *lifecycle.Worker, st *loopStats) error {
	ps := [2]model.Params{params, model.NewParams(m.Variables())}
	gs := [2]model.Params{model.NewParams(m.Variables()), model.NewParams(m.Variables())}
	cur, g := 0, 0 // the parameters last landed; the gradients to write next
	step, err := c.Pull(ctx, 0, ps[cur])
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	st.step = step
	var inflight *client.Call
	var sentAt int64 // the step the gradients in flight were computed at
	defer func() {
		if inflight != nil {
			<-inflight.Done // the buffers are lent to it until it lands
		}
		if cur != 0 {
			copyParams(params, ps[cur])
		}
	}()
	for step < cfg.TrainSteps {
		t0 := time.Now()
		st.loss, err = m.ComputeGradients(ps[cur], gs[g])
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		st.compute += time.Since(t0)
		computedAt := step
		if inflight != nil {
			call := inflight
			inflight = nil
			cur ^= 1 // the call pulled into the other set
			if step, err = st.completeStep(ctx, cfg, m, ps[cur], lw, sentAt, call, nil); err != nil {
				return err
			}
			if step >= cfg.TrainSteps {
				break
			}
		}
		sentAt = computedAt
		inflight = c.PushPullAsync(ctx, computedAt, gs[g], 0, ps[cur^1])
		g ^= 1
	}
	if inflight != nil {
		call := inflight
		inflight = nil
		cur ^= 1
		if _, err = st.completeStep(ctx, cfg, m, ps[cur], lw, sentAt, call, nil); err != nil {
			return err
		}
	}
	return nil
}

// copyParams copies every variable of src into dst.
func copyParams(dst, src model.Params) {
	for k, v := range src {
		copy(dst[k], v)
	}
}

// exchange runs the push+pull that ends every step of a training loop:
// send makes the call under ctx, given the step its pull must wait for
// (sync mode); then it waits, counts the step, logs progress every
// StepsToValidate local steps and checkpoints when one is due. It returns
// the new global step. With st.restarted set, a call that waits is ended
// when a ps turns out to have restarted (see lifecycle.RestartWatch).
func (st *loopStats) exchange(ctx context.Context, cfg Config, m model.Model, params model.Params, lw *lifecycle.Worker, step int64, send func(ctx context.Context, minStep int64) *client.Call) (int64, error) {
	var minStep int64
	if cfg.Sync {
		minStep = step + 1
	}
	var w *lifecycle.RestartWatch
	cctx := ctx
	if st.restarted != nil {
		var cancel context.CancelCauseFunc
		cctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		w = &lifecycle.RestartWatch{Check: st.restarted, Cancel: cancel}
	}
	t := time.Now()
	call := send(cctx, minStep)
	st.comm += time.Since(t)
	return st.completeStep(ctx, cfg, m, params, lw, step, call, w)
}

// completeStep waits for the push+pull call of gradients computed at step
// (under w's watch, if not nil), counts the step, logs progress every
// StepsToValidate local steps and checkpoints when one is due. It returns
// the new global step.
func (st *loopStats) completeStep(ctx context.Context, cfg Config, m model.Model, params model.Params, lw *lifecycle.Worker, step int64, call *client.Call, w *lifecycle.RestartWatch) (int64, error) {
	t1 := time.Now()
	var minStep int64
	if cfg.Sync {
		minStep = step + 1
	}
	if err := lifecycle.WaitCall(call, cfg.callLog(), step, minStep, w); err != nil {
		return step, fmt.Errorf("step %d: %w", step, err)
	}
	exchange := time.Since(t1)
	st.comm += exchange
	st.local++
	if call.Dropped {
		st.dropped++
	}
	st.step = call.Step
	cfg.Observer.Step(StepStats{
		Worker: cfg.Cluster.Task.Index, GlobalStep: st.step, LocalStep: st.local, Loss: st.loss,
		Examples: max(cfg.Data.BatchSize, 1), Compute: st.lastCompute, Exchange: exchange, Dropped: call.Dropped,
	})
	if st.local%cfg.StepsToValidate == 0 {
		cfg.Logf("%s", m.Progress(st.local, st.step, params, st.loss))
		if v, ok := m.(model.Validator); ok && cfg.Cluster.IsChief() {
			validate(cfg, st.step, func() (map[string]float64, error) { return v.Validate(params) })
		}
		if v, ok := m.(model.SparseValidator); ok && cfg.Cluster.IsChief() && st.lookup != nil {
			validate(cfg, st.step, func() (map[string]float64, error) { return v.ValidateSparse(params, st.lookup) })
		}
	}
	return st.step, lw.Stepped(ctx, st.step)
}

// sparseLoop trains a sparse model. Each round trip pushes the gradients of
// one batch (dense and rows) and pulls the dense values and the rows of the
// next batch's keys. With overlap (asynchronous modes, see overlaps), a
// model that can read a batch ahead has the round trip in flight while it
// computes: see sparseOverlapLoop.
func sparseLoop(ctx context.Context, cfg Config, c psClient, m model.SparseModel, params model.Params, lw *lifecycle.Worker, st *loopStats, overlap bool) error {
	if ra, ok := m.(model.SparseReadAhead); ok && overlap {
		return sparseOverlapLoop(ctx, cfg, c, ra, params, lw, st)
	}
	tables := m.Tables()
	st.lookup = func(t int, keys []uint64, out []float32) error {
		_, err := c.PullRows(ctx, 0, tables[t].Name, keys, out)
		return err
	}
	grads := model.NewParams(m.Variables())
	q := newBatchQueue(m, st)
	q.held.grads, q.held.rows = nil, nil // (only the overlap loop computes ahead)
	keys, err := q.next()
	if errors.Is(err, model.ErrEndOfData) {
		// Back in the loop after a recovery, with nothing left to train.
		if st.step, err = c.Pull(ctx, 0, params); err != nil {
			return fmt.Errorf("pull: %w", err)
		}
		endOfData(cfg, st)
		return nil
	}
	if err != nil {
		return err
	}
	// The rows of the batch being computed (cur) and those the next pull
	// fills (nextRows) live in two sets of buffers, swapped every step, and
	// the row gradients in one: the exchange has landed before they are
	// reused.
	sets := rowSets{tables: tables}
	rowsFor := sets.of
	cur := rowsFor(0, keys)
	call := c.Do(ctx, &client.Request{Pull: true, Params: params, SparseParams: cur})
	if call.Err != nil {
		return q.hold(st, fmt.Errorf("pull: %w", call.Err), false, nil, nil)
	}
	step := call.Step
	st.step = step
	rows := make([][]float32, len(tables))
	rowGrads := make([][]float32, len(tables))
	pushed := make([]client.Rows, len(tables))
	for i := 1; step < cfg.TrainSteps; i ^= 1 {
		t0 := time.Now()
		for t := range tables {
			rows[t] = cur[t].Values
			rowGrads[t] = zeroed(rowGrads[t], len(cur[t].Values))
		}
		st.loss, err = m.SparseGradients(params, grads, rows, rowGrads)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		for t, tb := range tables {
			pushed[t] = client.Rows{Table: tb.Name, Keys: cur[t].Keys, Values: rowGrads[t]}
		}
		var nextRows []client.Rows // none after the last batch: only the push and the dense pull
		next, err := q.next()
		ended := errors.Is(err, model.ErrEndOfData)
		if err != nil && !ended {
			return fmt.Errorf("step %d: next batch: %w", step, err)
		}
		if !ended {
			nextRows = rowsFor(i, next)
		}
		st.lastCompute = time.Since(t0)
		st.compute += st.lastCompute
		send := func(ctx context.Context, minStep int64) *client.Call {
			req := &client.Request{
				Push: true, Step: step, Grads: grads, SparseGrads: pushed,
				Pull: true, MinStep: minStep, Params: params, SparseParams: nextRows,
			}
			if st.restarted == nil && !cfg.Replication.Enabled() {
				// Nothing watches the wait: the call is made and landed
				// on this goroutine (lifecycle.WaitCall), with no other in between.
				return c.Send(ctx, req)
			}
			return c.DoAsync(ctx, req)
		}
		step, err = st.exchange(ctx, cfg, m, params, lw, step, send)
		if err != nil && cfg.Replication.Enabled() {
			// The same step again while the shards fail over, as in
			// denseLoop: each shard applies it once.
			step, err = resendAfterFailover(ctx, cfg, step, err, func(rctx context.Context) (int64, error) {
				return st.exchange(rctx, cfg, m, params, lw, step, send)
			})
		}
		q.sent() // (a failed call is not resent: see heldBatches)
		if err != nil {
			return q.hold(st, err, false, nil, nil)
		}
		if ended {
			endOfData(cfg, st)
			return nil
		}
		cur = nextRows
	}
	return nil
}

// endOfData marks and logs a loop that stopped because the worker's data
// ended (--epochs) before the goal.
func endOfData(cfg Config, st *loopStats) {
	st.ended = true
	cfg.Logf("worker %d: end of data after %d epochs at global step %d (%d local steps; --train_steps=%d)",
		cfg.Cluster.Task.Index, cfg.Data.Epochs, st.step, st.local, cfg.TrainSteps)
}

// zeroed returns n zeros in buf's memory if it has room, else in a new
// slice.
func zeroed(buf []float32, n int) []float32 {
	buf = slices.Grow(buf[:0], n)[:n]
	clear(buf)
	return buf
}

// finish is the chief's end: evaluate, log, write the result file.
// endTraining lets a model drop what only its training needed before the
// final evaluation (model.TrainingEnder), and has that memory collected
// and handed back to the system at once: the collector would otherwise
// keep it until the heap had grown as large again.
func endTraining(m model.Model) {
	if te, ok := m.(model.TrainingEnder); ok && te.EndTraining() {
		debug.FreeOSMemory()
	}
}

func finish(ctx context.Context, cfg Config, c psClient, m model.Model, params model.Params, saved []int64, r Result) error {
	step, err := c.Pull(ctx, 0, params)
	if err != nil {
		return fmt.Errorf("chief: final pull: %w", err)
	}
	statuses, err := c.Status(ctx)
	if err != nil {
		return fmt.Errorf("chief: final status: %w", err)
	}
	for i, st := range statuses {
		if i < len(saved) && st.GlobalStep != saved[i] {
			// (Not seen: a push that lands past goalStall.)
			cfg.Logf("chief: warning: ps %d moved from step %d to %d after the final checkpoint: the result's metrics are of its parameters now, the final checkpoint holds those before",
				i, saved[i], st.GlobalStep)
		}
	}
	var metrics map[string]float64
	if sm, ok := m.(model.SparseModel); ok {
		tables := sm.Tables()
		metrics, err = sm.EvaluateSparse(params, func(t int, keys []uint64, out []float32) error {
			_, err := c.PullRows(ctx, 0, tables[t].Name, keys, out)
			return err
		})
	} else {
		metrics, err = m.Evaluate(params)
	}
	if err != nil {
		return fmt.Errorf("chief: evaluation: %w", err)
	}
	r.GlobalStep = step
	r.Mode = statuses[0].Mode
	r.StaleDropped = statuses[0].StaleDropped
	// Every push reaches ps 0 (it holds a part of every model), so its
	// counts are the job's batches; a ps that restarted counts from its
	// restart, so never less than the chief's own.
	pushes := max(statuses[0].AppliedPushes+statuses[0].StaleDropped, r.LocalSteps)
	if r.TrainingS > 0 {
		r.ExamplesPerS = float64(pushes) * float64(r.BatchSize) / r.TrainingS
	}
	for i, st := range statuses {
		r.RejectedPushes += st.RejectedPushes
		for _, t := range st.Tables {
			r.Tables = append(r.Tables, TableShard{PS: i, Name: t.Name, Rows: t.Rows, Bytes: t.Bytes,
				Admitted: t.Admitted, Evicted: t.Evicted, RejectedByAdmission: t.RejectedByAdmission})
			cfg.Logf("table %s on ps %d: %d rows, %.1f MiB, %d admitted, %d evicted, %d touches refused by admission",
				t.Name, i, t.Rows, float64(t.Bytes)/(1<<20), t.Admitted, t.Evicted, t.RejectedByAdmission)
		}
	}
	if r.Mode == "sync" {
		r.ReplicasToAggregate = cfg.ReplicasToAggregate
	}
	r.Metrics = metrics
	r.Loss = metrics["loss"]
	pick := func(k string) *float64 {
		if v, ok := metrics[k]; ok {
			return &v
		}
		return nil
	}
	r.Weight, r.Bias = pick("weight"), pick("bias")
	r.ValCrossEntropy, r.ValAccuracy, r.TestAccuracy = pick("val_cross_entropy"), pick("val_accuracy"), pick("test_accuracy")
	r.TestLogLoss, r.TestAUC = pick("test_log_loss"), pick("test_auc")
	if r.ValCrossEntropy != nil {
		r.Loss = *r.ValCrossEntropy
		cfg.Logf("After %d training step(s), validation cross entropy = %g", step, *r.ValCrossEntropy)
	}
	cfg.Logf("final: global step %d, %s, stale gradients dropped %d, metrics %v", step, r.Mode, r.StaleDropped, fmtMetrics(metrics))
	cfg.Observer.Final(step, metrics)
	if cfg.ResultFile == "" {
		return nil
	}
	return WriteJSON(cfg.ResultFile, r)
}

func fmtMetrics(m map[string]float64) string {
	b, _ := json.Marshal(m)
	return string(b)
}

// WriteJSON writes v to path as indented JSON, atomically: a temporary
// file beside it, then a rename, so a reader never sees half a file. Every
// result file (trainer, eval, the public models) is written through it.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".result-*")
	if err != nil {
		return fmt.Errorf("result file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("result file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("result file: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}

// rowSets are two sets of row buffers, swapped every step by the loops
// that overlap a step's exchange with the next batch: the rows of the batch
// being computed and those the next pull fills. The exchange has landed
// before a set is reused.
type rowSets struct {
	tables []model.Table
	sets   [2][]client.Rows
}

// of returns set i holding keys (one slice a table), its values zeroed.
func (s *rowSets) of(i int, keys [][]uint64) []client.Rows {
	if s.sets[i] == nil {
		s.sets[i] = make([]client.Rows, len(s.tables))
	}
	r := s.sets[i]
	for t, tb := range s.tables {
		r[t] = client.Rows{Table: tb.Name, Keys: keys[t], Values: zeroed(r[t].Values, len(keys[t])*tb.Dim)}
	}
	return r
}
