package trainer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/table/tier"
)

// openTier opens a ps's disk tier when cfg asks for one (nil if not).
func openTier(cfg PSConfig) (*tier.Manager, error) {
	if !cfg.Tiered {
		return nil, nil
	}
	task := cfg.Cluster.Task.Index
	dir := cfg.TableDir
	if dir == "" && cfg.CheckpointDir != "" {
		dir = filepath.Join(filepath.Dir(filepath.Clean(cfg.CheckpointDir)), fmt.Sprintf("tables-ps-%d", task))
	} else if dir == "" {
		d, err := os.MkdirTemp("", fmt.Sprintf("paramserv-tables-ps-%d-", task))
		if err != nil {
			return nil, fmt.Errorf("ps %d: a directory for the disk tier: %w", task, err)
		}
		dir = d
	} else {
		dir = filepath.Join(dir, fmt.Sprintf("ps-%d", task))
	}
	m, err := tier.Open(tier.Config{Dir: dir, Budget: cfg.TableMemory, EvictUnseen: cfg.EvictUnseen, Logf: cfg.Logf})
	if err != nil {
		return nil, &ConfigError{Err: fmt.Errorf("ps %d: --table_dir: %w", task, err)}
	}
	cfg.Logf("ps %d: sparse tables keep %d bytes of rows in memory, the rest on disk in %s (--table_memory, --table_dir)", task, cfg.TableMemory, dir)
	return m, nil
}

// runTier runs the tier's background loop until the returned stop is
// called; a store that fails stops the ps with its error.
// fail stops the ps. stop returns the loop's error; a second call returns
// it again.
func runTier(ctx context.Context, cfg PSConfig, m *tier.Manager, s *server.Server, fail context.CancelCauseFunc) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		if err := m.Run(ctx, s.Lock()); err != nil {
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
	w, ok := cfg.PSObserver.(interface {
		WatchTier(func() TierStats)
	})
	if !ok {
		return
	}
	w.WatchTier(func() TierStats {
		lock := s.Lock()
		lock.Lock()
		t := m.Stats()
		lock.Unlock()
		return TierStats{HotRows: t.HotRows, DiskRows: t.DiskRows, HotBytes: t.HotBytes, Budget: t.Budget, DiskBytes: t.DiskBytes,
			Lookups: t.Lookups, Hits: t.Hits, Promotions: t.Promotions, Demotions: t.Demotions, EvictedOnDisk: t.Evicted,
			Filtered: t.Filtered, FilterBytes: t.FilterBytes}
	})
}

// TierStats is what a ps's disk tier for sparse tables reports, for the
// ps's metrics (shard.TierStats).
type TierStats = shard.TierStats
