package cli

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/paramserv/paramserv/internal/trainer"
)

// replicaFlags are the flags of replicated shards (docs/REPLICATION.md).
// Not to be confused with --replicas_to_aggregate (trainFlags.replicas).
type replicaFlags struct {
	replicas        int
	failoverTimeout time.Duration
	hosts           string
}

func defineReplicaFlags(fs *flag.FlagSet) *replicaFlags {
	r := &replicaFlags{}
	fs.IntVar(&r.replicas, "replicas", 1, "copies of each ps's shard, on that many ps (1: no copies); with 2 or more a ps killed during training is replaced by a copy without losing a step (models linreg, mnist, sparse_lr)")
	fs.DurationVar(&r.failoverTimeout, "failover_timeout", time.Second, "with --replicas > 1: a ps not heard from for this long is removed and its shards fail over to their copies")
	fs.StringVar(&r.hosts, "replica_hosts", "", "with --replicas=R > 1: R host:port per ps, in ps order: its replication port, then the ports of its copies of the R-1 shards before it (paramserv local chooses them)")
	return r
}

// apply puts the flags into cfg and checks them against its cluster.
func (r *replicaFlags) apply(cfg *taskConfig) error {
	if r.replicas < 1 {
		return fmt.Errorf("--replicas=%d: want 1 or more", r.replicas)
	}
	if r.replicas == 1 {
		return nil
	}
	rc := trainer.Replication{Replicas: r.replicas, FailoverTimeout: r.failoverTimeout}
	if r.hosts != "" {
		rc.Hosts = strings.Split(r.hosts, ",")
	}
	if cfg.Model != "linreg" && cfg.Model != "mnist" && cfg.Model != "sparse_lr" {
		return fmt.Errorf("--replicas=%d: replicated shards serve the built-in models linreg, mnist and sparse_lr only for now; --model=%s is not one (use --replicas=1)", r.replicas, cfg.Model)
	}

	n := len(cfg.Cluster.Spec.PS)
	if err := rc.Check(n); err != nil && !(r.hosts == "" && r.replicas <= n && r.failoverTimeout > 0) {
		return err
	}
	cfg.Replication, cfg.PS.Options = rc, rc
	return nil
}
