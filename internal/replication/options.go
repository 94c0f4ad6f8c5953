package replication

import (
	"fmt"
	"time"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/replica"
)

// Options are the settings of replicated shards (--replicas,
// --failover_timeout, --replica_hosts; docs/REPLICATION.md), the same for
// every ps and worker of a job. Replicas <= 1 is a cluster without
// replicas: none of this package runs.
type Options struct {
	Replicas        int
	FailoverTimeout time.Duration
	// Hosts are, for each ps p in order, Replicas addresses: where p's
	// replication peer listens, then where p serves its copy of shard
	// p-1, p-2, … (mod the number of ps).
	Hosts []string
}

// Enabled reports whether shards are replicated.
func (o Options) Enabled() bool { return o.Replicas > 1 }

// Check says what is wrong with o for a cluster of n ps.
func (o Options) Check(n int) error {
	if !o.Enabled() {
		return nil
	}
	if o.Replicas > n {
		return fmt.Errorf("--replicas=%d with %d ps: want 1 to %d (no two copies of a shard on one ps)", o.Replicas, n, n)
	}
	if o.FailoverTimeout <= 0 {
		return fmt.Errorf("--failover_timeout=%v: want > 0", o.FailoverTimeout)
	}
	if len(o.Hosts) != n*o.Replicas {
		return fmt.Errorf("--replica_hosts: %d addresses, want %d (%d per ps: replication, then a copy of each earlier shard)", len(o.Hosts), n*o.Replicas, o.Replicas)
	}
	return nil
}

// replAddrs are the ps's replication addresses, by index (Config.Addrs).
func (o Options) replAddrs(n int) []string {
	addrs := make([]string, n)
	for q := range n {
		addrs[q] = o.Hosts[q*o.Replicas]
	}
	return addrs
}

// copyAddr is where ps q serves its copy of shard s ("" for q's own shard,
// which it serves at its ps address).
func (o Options) copyAddr(q, s, n int) string {
	k := ((q-s)%n + n) % n
	return o.Hosts[q*o.Replicas+k]
}

// copies are the addresses of shard s's copies in order of succession.
func (o Options) copies(s int, psAddrs []string) []string {
	n := len(psAddrs)
	out := []string{psAddrs[s]}
	for _, q := range replica.Members(s, n, o.Replicas)[1:] {
		out = append(out, o.copyAddr(q, s, n))
	}
	return out
}

// ConfigError marks a configuration the user must fix (exit status 2).
type ConfigError = cluster.ConfigError
