package trainer

import (
	"context"

	"github.com/paramserv/paramserv/internal/replication"
)

// Replication configures replicated shards (--replicas,
// docs/REPLICATION.md); package replication runs them. Replicas <= 1 is
// today's cluster: none of it runs.
type Replication = replication.Options

// workerReplication is a worker's side of replicated shards.
func workerReplication(cfg Config) replication.WorkerConfig {
	return replication.WorkerConfig{
		Options: cfg.Replication, Cluster: cfg.Cluster, Dial: cfg.Dial,
		RecoveryTimeout: cfg.RecoveryTimeout, WaitLogEvery: cfg.WaitLogEvery, Logf: cfg.Logf,
	}
}

// replicatedWorker prepares a worker's config for replicated shards:
// connections that fail over (replication.WorkerConfig.Dialer).
func replicatedWorker(cfg *Config, sparse bool) error {
	if !cfg.Replication.Enabled() {
		return nil
	}
	if err := cfg.Replication.CheckWorker(len(cfg.Cluster.Spec.PS), sparse, cfg.IncrementalPull); err != nil {
		return &ConfigError{Err: err}
	}
	cfg.Dial = workerReplication(*cfg).Dialer()
	return nil
}

// resendAfterFailover sends a step again while the shards fail over
// (replication.WorkerConfig.ResendAfterFailover).
func resendAfterFailover(ctx context.Context, cfg Config, step int64, err error, send func(context.Context) (int64, error)) (int64, error) {
	return workerReplication(cfg).ResendAfterFailover(ctx, step, err, send)
}
