package lifecycle

import (
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/vfs"
)

// Config is what a worker's lifecycle needs to know of the job: its
// cluster, the chief's choices for the ps (its Init), the checkpoint
// schedule, and how long to wait and how often to say so. The built-in
// loops (package trainer) fill it from their flags; package session from
// the program's settings.
type Config struct {
	// Cluster is the cluster and this worker's task.
	Cluster cluster.Config

	// The chief's choices for the whole cluster, sent with its Init (see
	// client.InitOptions) and recorded in every checkpoint's manifest.
	Optimizer           optim.Config
	Sync                bool
	ReplicasToAggregate int   // sync: 0 means every worker
	MaxStaleness        int64 // async: drop gradients older than this (0: never)
	SyncTimeout         time.Duration
	SyncProceed         bool
	SplitBytes          int // as the client splits variables (for the manifest)

	// Checkpoints: the chief saves every SaveSteps global steps and/or
	// every SaveEvery, and at the end, keeping the last KeepCheckpoints
	// (checkpoint.DefaultKeep if 0). IncrementalCheckpoints: between full
	// checkpoints, every FullCheckpointEvery saves, each ps writes only
	// what changed since the previous checkpoint.
	CheckpointDir          string
	SaveSteps              int64
	SaveEvery              time.Duration
	KeepCheckpoints        int
	IncrementalCheckpoints bool
	FullCheckpointEvery    int

	// StartupTimeout bounds the start-up (5 minutes if 0); RecoveryTimeout
	// each wait for the ps to come back after a failure (5 minutes if 0).
	StartupTimeout, RecoveryTimeout time.Duration

	// Logf receives every log line (nil discards them); WaitLogEvery is
	// how often a wait logs what it waits for (5s if 0).
	Logf         func(format string, args ...any)
	WaitLogEvery time.Duration

	// Observer is told of checkpoints and recoveries (nil: nobody).
	Observer Observer
	// FS is the filesystem of CheckpointDir (vfs.OS if nil).
	FS vfs.FS
	// Hook, if set, is called at the moments a fault test strikes at:
	// "init" just before the chief's Init, "save" just before a
	// checkpoint's shards are written, "manifest" just before its
	// manifest is.
	Hook func(event string, step int64)
}

// ConfigError marks a configuration the user must fix (exit status 2).
type ConfigError = cluster.ConfigError

// Defaults fills in the zero fields of c that have a default.
func (c *Config) Defaults() {
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.WaitLogEvery <= 0 {
		c.WaitLogEvery = 5 * time.Second
	}
	if c.StartupTimeout <= 0 {
		c.StartupTimeout = 5 * time.Minute
	}
	if c.RecoveryTimeout <= 0 {
		c.RecoveryTimeout = 5 * time.Minute
	}
	if c.ReplicasToAggregate <= 0 {
		c.ReplicasToAggregate = len(c.Cluster.Spec.Workers)
	}
	if c.KeepCheckpoints <= 0 {
		c.KeepCheckpoints = checkpoint.DefaultKeep
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	if c.FS == nil {
		c.FS = vfs.OS
	}
	if c.Hook == nil {
		c.Hook = func(string, int64) {}
	}
}

// Observer is told what a worker does, for metrics and summaries (package
// telemetry implements it). Its methods run on the worker's goroutine
// between steps: they must be quick.
type Observer interface {
	// Step: one local step done (gradients computed, pushed, the new
	// values pulled).
	Step(StepStats)
	// CheckpointSaved: the chief saved (or failed to save) a checkpoint of
	// step; bytes is the size of every shard together.
	CheckpointSaved(step, bytes int64, took time.Duration, err error)
	// Recovery: the worker lost the ps (cause) and began recovering.
	Recovery(cause error)
	// Final: the chief's final evaluation at step (metrics as logged).
	Final(step int64, metrics map[string]float64)
	// Validated: the chief's validation at step, every --steps_to_validate
	// local steps (models that are a model.Validator).
	Validated(step int64, metrics map[string]float64)
}

// StepStats describes one local step of a worker.
type StepStats struct {
	Worker     int
	GlobalStep int64 // after the step
	LocalStep  int64 // this worker's steps so far
	Loss       float64
	Examples   int           // examples in the step's batch
	Compute    time.Duration // computing the gradients
	Exchange   time.Duration // the push and pull
	Dropped    bool          // the push was dropped as stale or duplicate
}

// NopObserver observes nothing.
type NopObserver struct{}

func (NopObserver) Step(StepStats)                                     {}
func (NopObserver) CheckpointSaved(int64, int64, time.Duration, error) {}
func (NopObserver) Recovery(error)                                     {}
func (NopObserver) Final(int64, map[string]float64)                    {}
func (NopObserver) Validated(int64, map[string]float64)                {}
