package trainer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/paramserv/paramserv/internal/replication"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/table/tier"
)

// openTier opens a ps's disk tier when cfg asks for one (nil if not).
func openTier(cfg PSConfig) (*tier.Manager, error) {
	if !cfg.Tiered {
		return nil, nil
	}
	return openTierOf(cfg, "", cfg.TableMemory)
}

// copyTiers gives each copy of a shard a replicated ps holds
// (--replicas) a disk tier of its own, in a directory of its own under
// the ps's, with an equal share of --table_memory. The ps's metrics show
// the copies' tiers together.
func copyTiers(cfg PSConfig) func(shardIdx, copies int) (shard.Tiers, replication.TierRun, error) {
	var mu sync.Mutex
	var all []watched // guarded by mu
	return func(shardIdx, copies int) (shard.Tiers, replication.TierRun, error) {
		m, err := openTierOf(cfg, fmt.Sprintf("shard-%d", shardIdx), cfg.TableMemory/int64(max(copies, 1)))
		if err != nil {
			return nil, nil, err
		}
		run := func(ctx context.Context, s *server.Server, fail func(error)) func() error {
			mu.Lock()
			all = append(all, watched{m, s})
			if len(all) == 1 {
				watchTiers(cfg, func() []watched {
					mu.Lock()
					defer mu.Unlock()
					return slices.Clone(all)
				})
			}
			mu.Unlock()
			stop := runTier(ctx, cfg, m, s, fail)
			return func() error {
				err := stop()
				// The ps's directory, once its last copy's store is gone.
				_ = os.Remove(filepath.Dir(m.Store().Dir()))
				return err
			}
		}
		return m, run, nil
	}
}

// openTierOf opens a disk tier of budget bytes in the ps's directory, or
// in sub below it.
func openTierOf(cfg PSConfig, sub string, budget int64) (*tier.Manager, error) {
	task := cfg.Cluster.Task.Index
	dir := cfg.TableDir
	if dir == "" && cfg.CheckpointDir != "" {
		dir = filepath.Join(filepath.Dir(filepath.Clean(cfg.CheckpointDir)), fmt.Sprintf("tables-ps-%d", task))
	} else if dir == "" {
		pattern := fmt.Sprintf("paramserv-tables-ps-%d-", task)
		if sub != "" {
			pattern += sub + "-"
		}
		d, err := os.MkdirTemp("", pattern)
		if err != nil {
			return nil, fmt.Errorf("ps %d: a directory for the disk tier: %w", task, err)
		}
		dir = d
	} else {
		dir = filepath.Join(dir, fmt.Sprintf("ps-%d", task))
	}
	what := ""
	if sub != "" {
		dir = filepath.Join(dir, sub)
		what = " of its copy of " + strings.ReplaceAll(sub, "-", " ")
	}
	m, err := tier.Open(tier.Config{Dir: dir, Budget: budget, EvictUnseen: cfg.EvictUnseen, Logf: cfg.Logf})
	if err != nil {
		return nil, &ConfigError{Err: fmt.Errorf("ps %d: --table_dir: %w", task, err)}
	}
	cfg.Logf("ps %d: sparse tables%s keep %d bytes of rows in memory, the rest on disk in %s (--table_memory, --table_dir)", task, what, budget, dir)
	return m, nil
}

// runTier runs the tier's background loop until the returned stop is
// called; a store that fails stops the ps with its error.
// fail stops the ps. stop returns the loop's error; a second call returns
// it again.
func runTier(ctx context.Context, cfg PSConfig, m *tier.Manager, s *server.Server, fail func(error)) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		if err := m.Run(ctx, s.Lock()); err != nil {
			if derr, damaged := m.Damaged(err); damaged {
				err = derr
			}
			runErr = fmt.Errorf("ps %d: %w; the ps stops: restart it to restore its shard from the newest checkpoint", cfg.Cluster.Task.Index, err)
			cfg.Logf("%v", runErr)
			fail(runErr)
		}
	}()
	var once sync.Once
	return func() error {
		once.Do(func() {
			cancel()
			<-done
			if err := m.Close(); err != nil {
				cfg.Logf("ps %d: closing the disk tier: %v", cfg.Cluster.Task.Index, err)
			}
		})
		return runErr
	}
}

// serverConfig is c with the disk tier m, if any.
func serverConfig(m *tier.Manager, c server.Config) server.Config {
	if m != nil {
		c.Tiers = m
	}
	return c
}

// watchTier shows the tier's counters in the ps's metrics, if it has
// them (telemetry.PS).
func watchTier(cfg PSConfig, m *tier.Manager, s *server.Server) {
	watchTiers(cfg, func() []watched { return []watched{{m, s}} })
}

// watched is a disk tier and the server whose lock guards it.
type watched struct {
	m *tier.Manager
	s *server.Server
}

// watchTiers shows the counters of the tiers list returns, added up, in
// the ps's metrics, if it has them (telemetry.PS).
func watchTiers(cfg PSConfig, list func() []watched) {
	w, ok := cfg.PSObserver.(interface {
		WatchTier(func() TierStats)
	})
	if !ok {
		return
	}
	w.WatchTier(func() TierStats {
		var sum TierStats
		for _, x := range list() {
			lock := x.s.Lock()
			lock.Lock()
			t := x.m.Stats()
			lock.Unlock()
			sum.HotRows += t.HotRows
			sum.DiskRows += t.DiskRows
			sum.HotBytes += t.HotBytes
			sum.Budget += t.Budget
			sum.DiskBytes += t.DiskBytes
			sum.Lookups += t.Lookups
			sum.Hits += t.Hits
			sum.Promotions += t.Promotions
			sum.Demotions += t.Demotions
			sum.EvictedOnDisk += t.Evicted
			sum.Filtered += t.Filtered
			sum.FilterBytes += t.FilterBytes
		}
		return sum
	})
}

// TierStats is what a ps's disk tier for sparse tables reports, for the
// ps's metrics (shard.TierStats).
type TierStats = shard.TierStats
