package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paramserv/paramserv/internal/shard"
)

// TierStats is shard.TierStats: importing it from there, not from
// trainer, keeps the disk tier's store (pebble) out of every worker
// binary and of the Python client library.
type TierStats = shard.TierStats

// WatchTier adds the disk tier's metrics, read by read at each scrape
// (it takes the server's lock).
func (p *PS) WatchTier(read func() TierStats) {
	f := factory{reg: p.reg, sub: "table_tier"}
	for _, m := range []struct {
		name, help string
		counter    bool
		get        func(TierStats) int64
	}{
		{"hot_rows", "Sparse table rows held in memory.", false, func(s TierStats) int64 { return s.HotRows }},
		{"disk_rows", "Sparse table rows held on disk.", false, func(s TierStats) int64 { return s.DiskRows }},
		{"hot_bytes", "Bytes of the rows in memory (at their row size).", false, func(s TierStats) int64 { return s.HotBytes }},
		{"budget_bytes", "--table_memory.", false, func(s TierStats) int64 { return s.Budget }},
		{"disk_bytes", "Bytes of the disk tier's files.", false, func(s TierStats) int64 { return s.DiskBytes }},
		{"lookups_total", "Keys a request used that were not in memory, looked for on disk.", true, func(s TierStats) int64 { return s.Lookups }},
		{"hits_total", "Of those, keys found on disk (hit rate: hits / lookups).", true, func(s TierStats) int64 { return s.Hits }},
		{"promotions_total", "Rows moved from disk into memory.", true, func(s TierStats) int64 { return s.Promotions }},
		{"demotions_total", "Rows moved from memory to disk (the coldest, in the background).", true, func(s TierStats) int64 { return s.Demotions }},
		{"filter_bytes", "Bytes of the miss filter (keys on disk), beside the budget.", false, func(s TierStats) int64 { return s.FilterBytes }},
		{"filtered_total", "Of the lookups, keys the miss filter knew were not on disk (no disk read).", true, func(s TierStats) int64 { return s.Filtered }},
		{"evicted_on_disk_total", "Rows found on disk past their eviction (--evict_after_steps, --evict_unseen) and dropped.", true, func(s TierStats) int64 { return s.EvictedOnDisk }},
	} {
		get := m.get
		opts := func() float64 { return float64(get(read())) }
		if m.counter {
			f.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "paramserv", Subsystem: f.sub, Name: m.name, Help: m.help}, opts))
		} else {
			f.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "paramserv", Subsystem: f.sub, Name: m.name, Help: m.help}, opts))
		}
	}
}
