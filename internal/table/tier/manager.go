package tier

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// Config configures the disk tier of one ps.
type Config struct {
	// Dir is the store's directory; its contents are replaced.
	Dir string
	// Budget is the memory, in bytes, the rows of all the ps's tables may
	// take in the hot tier; 0 keeps none there between requests.
	Budget int64
	// EvictUnseen drops rows (in both tiers) not pushed for this long by
	// the wall clock; 0 never does.
	EvictUnseen time.Duration
	// Every is how often the background loop looks at the budget (default
	// 20ms); it also runs at once when asked (Kick).
	Every time.Duration
	// Logf receives the log lines; nil discards them.
	Logf func(format string, args ...any)
	// FS is the filesystem the store is on (nil: the disk's); tests give
	// one that fails (pebble's vfs/errorfs).
	FS vfs.FS
	// Engine is the store's engine: EngineHash (the default, also for "")
	// or EnginePebble.
	Engine string
}

// cacheBytes is pebble's block cache for a budget: an eighth of it,
// between 16 and 256 MiB. memtableBytes is its write buffer: an eighth,
// between 2 and 64 MiB. The cache's floor holds the index and Bloom filter
// blocks of a few million rows on disk (about 2 bytes a row): a lookup
// whose filter and index blocks are not in the cache reads them from the
// file first, which made the million-row benchmark twice as costly in CPU
// with a 2 MiB cache as with 16 MiB. With a large budget, fewer flushes
// and compactions.
func cacheBytes(budget int64) int64    { return min(max(budget/8, 16<<20), 256<<20) }
func memtableBytes(budget int64) int64 { return min(max(budget/8, 2<<20), 64<<20) }

// Manager is the disk tier of one ps: one Store, and a Table for each
// sparse table of the installed state. It implements shard.Tiers.
//
// Concurrency: Attach, Stats and the Tables' methods run under the owner's
// lock (the server's, given to Run); Run's loop takes that lock for its
// bookkeeping and writes to the store with it released. Load and Unload
// may run with or without it.
type Manager struct {
	cfg   Config
	store *Store

	tables []*Table // guarded by the owner's lock
	names  []string
	steps  []stepAt // the wall-clock time each step was first seen (EvictUnseen)
	err    error
	kick   chan struct{}
	bound  *memBound // the bound every table's Fetch keeps (bound.go)

	stageMu sync.Mutex               // guards staged (Load runs with no lock held)
	staged  map[*sparse.Table]*Table // disk tiers Load filled, until Attach adopts them (load.go)
}

type stepAt struct {
	step int64
	at   time.Time
}

// Open opens the store in cfg.Dir.
func Open(cfg Config) (*Manager, error) {
	if cfg.Budget < 0 {
		return nil, fmt.Errorf("tier: budget %d bytes, want >= 0", cfg.Budget)
	}
	if cfg.Every <= 0 {
		cfg.Every = 20 * time.Millisecond
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	fs := cfg.FS
	if fs == nil {
		fs = vfs.Default
	}
	if left, err := fs.List(cfg.Dir); err == nil && len(left) > 0 {
		// A ps killed (kill -9, a crash, a failed store) leaves its store,
		// perhaps damaged: nothing in it is read.
		cfg.Logf("disk tier: %s holds %d files a previous process left (its store, perhaps damaged): emptied, unread; the rows come from the checkpoint (under --replicas, from the shard's primary)", cfg.Dir, len(left))
	}
	s, err := openStore(cfg.Dir, cfg.Engine, cacheBytes(cfg.Budget), memtableBytes(cfg.Budget), cfg.FS)
	if err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, store: s, kick: make(chan struct{}, 1)}
	m.bound = &memBound{budget: cfg.Budget, margin: boundMargin(cfg.Budget), tables: func() []*Table { return m.tables }}
	return m, nil
}

// Store is the manager's store.
func (m *Manager) Store() *Store { return m.store }

// Attach gives each table a disk tier: the one Load filled as the table
// was restored, else an empty one. The rows of the tables it replaces are
// deleted from the store.
func (m *Manager) Attach(names []string, tables []*sparse.Table) []shard.Tier {
	for _, t := range m.tables {
		if err := t.Drop(); err != nil && m.err == nil {
			m.err = err
		}
	}
	m.tables, m.names = m.tables[:0], names
	tiers := make([]shard.Tier, len(tables))
	for i, t := range tables {
		tt := m.adopt(t)
		if tt == nil {
			tt = NewTable(t, m.store)
		} else {
			tt.changes.start(t) // the restored state is the base of the next delta
		}
		tt.bound = m.bound
		m.tables = append(m.tables, tt)
		tiers[i] = attached{tt}
	}
	m.Kick()
	return tiers
}

// attached is a Table as a shard.Tier.
type attached struct{ *Table }

func (a attached) Cut() shard.TierCut { return a.Table.Cut() }

func (a attached) CutChanges() shard.TierChanges { return a.Table.CutChanges() }

func (a attached) Counts() shard.TierCounts {
	return shard.TierCounts{Rows: a.onDisk, Lookups: a.stats.Lookups, Hits: a.stats.Hits}
}

// Merge returns hot's rows with the cut's, in key order.
func (c *Cut) Merge(hot sparse.Snapshot) (sparse.Snapshot, error) {
	rows, err := c.Rows()
	if err != nil {
		return hot, err
	}
	return Merge(hot, rows), nil
}

// Kick asks the background loop to look at the budget now.
func (m *Manager) Kick() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// TableStats is one table's tier counters.
type TableStats struct {
	Name string
	Stats
}

// Totals are the counters of every table, the store's size and the
// budget.
type Totals struct {
	Stats
	Tables    []TableStats
	DiskBytes int64
	Budget    int64
	HotBytes  int64 // the rows in memory, at RowBytes each
	// Stalls counts the requests that demoted rows themselves, waiting
	// for the disk, because the rows in memory would have passed the
	// budget and its margin (bound.go).
	Stalls int64
}

// Stats reads the counters; call it under the owner's lock.
func (m *Manager) Stats() Totals {
	t := Totals{DiskBytes: m.store.DiskBytes(), Budget: m.cfg.Budget, Stalls: m.bound.stalls}
	for i, tb := range m.tables {
		s := tb.Stats()
		t.Tables = append(t.Tables, TableStats{Name: m.names[i], Stats: s})
		t.HotRows += s.HotRows
		t.DiskRows += s.DiskRows
		t.Lookups += s.Lookups
		t.Hits += s.Hits
		t.Promotions += s.Promotions
		t.Demotions += s.Demotions
		t.Evicted += s.Evicted
		t.Filtered += s.Filtered
		t.Rebuilds += s.Rebuilds
		t.FilterBytes += s.FilterBytes
		t.HotBytes += s.HotRows * tb.RowBytes()
	}
	return t
}

// Round is one pass of the background loop at time now: under lock, it
// demotes the coldest rows of each table past its share of the budget,
// applies EvictUnseen and hands each table's pending rows to a write; the
// writes run with lock released. It returns the first store error (the
// ps must stop then).
func (m *Manager) Round(lock sync.Locker, now time.Time) error { return m.round(lock, now, false) }

// round is Round; with gather, a table's pending changes are written only
// once they are many (Table.batch), as the loop does.
func (m *Manager) round(lock sync.Locker, now time.Time, gather bool) error {
	lock.Lock()
	if m.err == nil {
		m.err = m.store.Err()
	}
	if m.err != nil {
		lock.Unlock()
		return m.err
	}
	var hot int64
	for _, t := range m.tables {
		hot += int64(t.hot.Len()) * t.RowBytes()
	}
	if over := hot - m.cfg.Budget; over > 0 {
		for _, t := range m.tables {
			share := int64(t.hot.Len()) * t.RowBytes()
			rows := (over*share/hot + t.RowBytes() - 1) / t.RowBytes()
			// A little more than the excess, so that the next pushes'
			// new rows do not start another round at once.
			t.Demote(int(rows + rows/8))
		}
	}
	m.evictUnseen(now)
	flights := make([]*Flight, len(m.tables))
	rebuilds := make([]*Rebuild, len(m.tables))
	for i, t := range m.tables {
		if !gather || t.Pending() >= t.batch() {
			flights[i] = t.StartFlush()
		}
		rebuilds[i] = t.StartRebuild()
	}
	lock.Unlock()
	errs := make([]error, len(flights))
	for i, f := range flights {
		if f != nil {
			errs[i] = f.Write()
		}
	}
	scanErrs := make([]error, len(rebuilds))
	for i, rb := range rebuilds {
		if rb != nil {
			scanErrs[i] = rb.Scan()
		}
	}
	lock.Lock()
	defer lock.Unlock()
	for i, f := range flights {
		if f != nil && i < len(m.tables) && f.t == m.tables[i] {
			f.t.EndFlush(f, errs[i])
		}
	}
	for i, rb := range rebuilds {
		if rb != nil {
			rb.t.EndRebuild(rb, scanErrs[i])
		}
	}
	for _, t := range m.tables {
		if err := t.Err(); err != nil && m.err == nil {
			m.err = err
		}
	}
	if m.err == nil {
		m.err = m.store.Err()
	}
	return m.err
}

// evictUnseen drops the rows not pushed since EvictUnseen ago: the steps
// seen are timed as they come, and the rows last touched before the step
// of that time go, from memory now and from disk when next looked for.
func (m *Manager) evictUnseen(now time.Time) {
	if m.cfg.EvictUnseen <= 0 || len(m.tables) == 0 {
		return
	}
	step := m.tables[0].hot.Clock()
	if n := len(m.steps); n == 0 || m.steps[n-1].step < step {
		m.steps = append(m.steps, stepAt{step, now})
	}
	cut := -1
	for i, s := range m.steps {
		if now.Sub(s.at) >= m.cfg.EvictUnseen {
			cut = i
		}
	}
	if cut < 0 {
		return
	}
	cutoff := m.steps[cut].step
	m.steps = m.steps[cut:]
	for i, t := range m.tables {
		if n := t.hot.EvictBefore(cutoff); n > 0 {
			m.cfg.Logf("table %q: evicted %d rows in memory not pushed for %s (--evict_unseen)", m.names[i], n, m.cfg.EvictUnseen)
		}
	}
}

// Run runs Round every Config.Every, and when kicked, until ctx ends or a
// round fails; it returns that error.
func (m *Manager) Run(ctx context.Context, lock sync.Locker) error {
	tick := time.NewTicker(m.cfg.Every)
	defer tick.Stop()
	var logged time.Time
	var last Stats
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-m.kick:
		}
		now := time.Now()
		if err := m.round(lock, now, true); err != nil {
			return err
		}
		if now.Sub(logged) >= time.Minute {
			lock.Lock()
			t := m.Stats()
			lock.Unlock()
			if t.Stats != last {
				m.cfg.Logf("disk tier: %d rows in memory (%d of %d bytes), %d on disk (%d bytes in %s); %d promotions, %d demotions, hit rate %.3f; %d requests waited for the disk to stay within the budget",
					t.HotRows, t.HotBytes, t.Budget, t.DiskRows, t.DiskBytes, m.store.dir, t.Promotions, t.Demotions, float64(t.Hits)/float64(max(t.Lookups, 1)), t.Stalls)
			}
			logged, last = now, t.Stats
		}
	}
}

// Close closes the store and deletes its files.
func (m *Manager) Close() error { return m.store.Close() }
