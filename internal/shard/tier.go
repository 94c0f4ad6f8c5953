package shard

import (
	"fmt"

	"github.com/paramserv/paramserv/internal/table/sparse"
)

// Tiers gives the tables of each state the shard installs a second tier
// (internal/table/tier keeps rows past a memory budget on disk). The shard
// calls it under its caller's lock; what it does with time and disk is its
// own (a server runs its demotions).
type Tiers interface {
	// Attach is called as a state is installed, with its tables' names and
	// tables in layout order; it returns each table's tier (nil: none).
	// The tiers of the state it replaces are dropped.
	Attach(names []string, tables []*sparse.Table) []Tier
}

// TierLoader is Tiers that takes a restored table's rows past memory
// straight into the tier (RestoreInto), so that a table larger than memory
// is never built in memory whole.
type TierLoader interface {
	// Load takes rows, in ascending key order (else it fails with
	// sparse.ErrUnordered), for t, an empty table of a state being
	// restored, one of tables: it imports into t those that stay in
	// memory and keeps the others for the tier Attach gives t. It runs
	// with no lock held.
	Load(t *sparse.Table, rows sparse.Snapshot, tables int) error
	// Unload lets go of what Load kept for t, whose state will not be
	// installed.
	Unload(t *sparse.Table)
}

// Tier is the second tier of one table: rows the table does not hold.
type Tier interface {
	// Fetch puts the rows of keys that the tier holds back into the table
	// before the shard reads or changes them, so that every result is the
	// one the table would give with every row in it. An error means the
	// tier's rows are lost: the shard fails (Failed) and must be restored.
	Fetch(keys []uint64) error
	// Cut is a view of the tier's rows now, taken with the shard's Cut
	// and read with no lock held.
	Cut() TierCut
	// Counts are the tier's rows and lookups, for the shard's Status.
	Counts() TierCounts

	// Incremental checkpoints (ckpt_incr.go). The tier keeps, with the
	// rows it holds, whether each changed since the last cut, as the
	// table's dirty bits do for the rows in memory (Fetch gives the mark
	// back to the table).

	// ChangesKnown reports whether CutChanges can say what changed in the
	// tier since the last ResetChanges or CutChanges.
	ChangesKnown() bool
	// ResetChanges starts a new interval, with the table's ResetChanges.
	ResetChanges()
	// CutChanges is a view of the tier's rows changed since the last
	// interval began, and of the keys it dropped since, taken with the
	// table's FrozenChanges; it starts a new interval.
	CutChanges() TierChanges
}

// TierChanges is a view of what changed in a tier since the last cut.
type TierChanges interface {
	// Merge returns the rows of hot, the table's changed rows at the cut
	// (ascending keys), with the tier's changed rows, in ascending key
	// order, and deleted with the keys the tier no longer holds that the
	// last cut may hold.
	Merge(hot sparse.Snapshot, deleted []uint64) (sparse.Snapshot, []uint64, error)
	// Release lets go of the view.
	Release()
}

// TierCounts are what a tier reports in the shard's Status.
type TierCounts struct {
	Rows    int64 // rows the tier holds, not in the table
	Lookups int64 // keys looked for in the tier (not in the table)
	Hits    int64 // of them, found there
}

// TierCut is a view of a tier's rows at a cut.
type TierCut interface {
	// Merge returns the rows of hot, the table's rows at the cut, with the
	// tier's, in ascending key order.
	Merge(hot sparse.Snapshot) (sparse.Snapshot, error)
	// Columns writes the tier's rows at the cut to files of the tier's
	// own, a column a file, for a checkpoint that streams them into its
	// file (Cut.StreamShard) rather than gather them in memory. Close
	// the columns when done; the cut may be released before.
	Columns() (TierColumns, error)
	// Release lets go of the view; it may be called more than once.
	Release()
}

// TierColumns are a tier's rows at a cut (TierCut.Columns), in an order of
// the tier's own (the keys distinct), a column at a time, each column's
// bytes as a checkpoint's tensor of it holds them (little-endian):
//
//	ColKeys     uint64 a row
//	ColUpdates  int64 a row (absent where the table keeps no counts)
//	ColTouch    int64 a row, the last-touched step
//	ColValues   float32 [dim] a row, the values; ColValues+1+s state slot s
type TierColumns interface {
	// Len is the number of rows.
	Len() int
	// ReadAt reads bytes [off, off+len(dst)) of column col into dst. It
	// may run from several goroutines at once.
	ReadAt(col int, dst []byte, off int64) error
	// Close lets go of the columns (deletes their files).
	Close() error
}

// The columns of TierColumns.
const (
	ColKeys = iota
	ColUpdates
	ColTouch
	ColValues
)

// attachTiers gives st's tables their tiers, if the shard has Tiers.
func (s *Shard) attachTiers(st *State) {
	if s.cfg.Tiers == nil || st == nil {
		return
	}
	names := make([]string, len(st.tableOrd))
	tables := make([]*sparse.Table, len(st.tableOrd))
	for i, t := range st.tableOrd {
		names[i], tables[i] = t.name, t.t
	}
	for i, tier := range s.cfg.Tiers.Attach(names, tables) {
		st.tableOrd[i].tier = tier
	}
}

// fetch brings the rows of keys into the table from its tier.
func (t *table) fetch(keys []uint64) error {
	if t.tier == nil {
		return nil
	}
	return t.tier.Fetch(keys)
}

// Fail makes the shard fail with err (its ps gave up on the job): every
// later push and waiting pull fails with it, a kind the worker does not
// retry, until a state is installed. A shard already failed keeps its
// first error.
func (s *Shard) Fail(err error) {
	if s.syncFailed == nil {
		s.syncFailed = err
		s.version++
	}
}

// tierFailed makes the shard fail with a tier's error: every later push and
// waiting pull fails with it, until a state is installed.
//
// A tier whose store is damaged (TierDamage) loses its rows but not the
// job: requests fail as NotReady, so the workers wait while the ps
// restarts and restores its shard from the newest checkpoint; other
// failures (a full or failing disk) fail the job.
func (s *Shard) tierFailed(t *table, err error) error {
	if s.syncFailed == nil {
		if d, ok := s.cfg.Tiers.(TierDamage); ok {
			if derr, damaged := d.Damaged(err); damaged {
				s.syncFailed = fmt.Errorf("table %q: %w; the ps restarts and restores its shard from the newest checkpoint", t.name, derr)
				s.failRestart = true
				s.cfg.Logf("%v", s.syncFailed)
				s.version++
				return s.Failed()
			}
		}
		s.syncFailed = err
		s.cfg.Logf("table %q: %v; the shard fails: restart the ps, which restores from its checkpoint", t.name, err)
		s.version++
	}
	return s.Failed()
}

// TierDamage is Tiers that tells a damaged store (its rows lost, the
// shard to be restored) from other failures of a tier.
type TierDamage interface {
	// Damaged reports whether err, a tier's failure, is its store found
	// damaged, and returns err worded for the log.
	Damaged(err error) (error, bool)
}

// TierStats is what a ps's disk tier for sparse tables reports
// (internal/table/tier; docs/TIERS.md), for the ps's metrics
// (internal/telemetry): a plain value here so that the metrics need not
// import the tier and its store.
type TierStats struct {
	HotRows, DiskRows int64 // rows in memory, on disk
	HotBytes, Budget  int64 // the rows in memory's bytes, and the budget
	DiskBytes         int64 // the store's files
	Lookups, Hits     int64 // keys looked for on disk, and found there
	Promotions        int64 // rows moved into memory
	Demotions         int64 // rows moved to disk
	EvictedOnDisk     int64 // rows found on disk past their eviction
	Filtered          int64 // of Lookups, keys the miss filter knew were not on disk
	FilterBytes       int64 // the miss filter's memory
}

// TierStreamLoader is a TierLoader that takes a restored table's rows as a
// stream (RestoreChainsInto): a run of rows at a time, as they lie in the
// checkpoint's files, so that neither a re-sharding restore nor a delta
// chain gathers the table in memory first.
type TierStreamLoader interface {
	TierLoader
	// LoadStream is Load of the rows of rows.
	LoadStream(t *sparse.Table, rows RowStream, tables int) error
}

// RowStream is a table's rows read from a checkpoint's files, in an order
// of their own (not by key; the keys are distinct), the same order at
// every reading.
type RowStream interface {
	// Len is the number of rows.
	Len() int
	// Touches calls f with the rows' last-touched steps, in order, a run
	// at a time (f must not keep the slice). It reports false, and calls
	// nothing, where the rows have none.
	Touches(f func(touch []int64)) bool
	// Rows calls f with the rows, in order, at most n at a time; the
	// run's slices are valid during the call only. It returns f's first
	// error.
	Rows(n int, f func(run sparse.Snapshot) error) error
}
