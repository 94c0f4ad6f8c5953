package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"

	"github.com/paramserv/paramserv/internal/table/sparse"
)

// Table is a sparse table in two tiers: the rows that fit its memory share
// in a sparse.Table (the hot tier), the others in a Store.
//
// Concurrency: every method runs under the owner's lock (the one that
// guards the sparse.Table, the server's), except Flight.Write, which runs
// with no lock held and only reads the flight it was given.
//
// Every key is in one tier at most: in the hot table, or in the disk tier,
// which is the store overlaid by the flight being written (flight) and the
// changes not yet handed to a write (pend), the newer over the older. A row
// moved to disk (Demote) goes into pend; Fetch takes a row back into the
// hot table from whichever layer holds it and leaves a deletion in pend.
type Table struct {
	hot    *sparse.Table
	store  *Store
	rows   rowStore // the table's rows in the store
	prefix uint32
	stride int  // floats per row: value and state
	slots  int  // state slots
	counts bool // rows carry update counts (Snapshot.Updates)

	pend   map[uint64]*entry
	flight map[uint64]*entry // nil when no write is in progress
	flying *Flight           // the write of flight, or nil
	bound  *memBound         // the memory bound of the tables this one shares a budget with, or nil
	onDisk int64             // rows in the disk tier (an estimate past evictions)
	miss   []uint64
	need   []uint64 // of miss, the keys to read from the store
	found  []byte   // their rows, as read

	// fresh are the keys promoted at the table's step freshAt, old those
	// of the step before: rows a pull brought in whose push may not have
	// come yet. Demote leaves them, since they are about to be used again.
	fresh, old map[uint64]struct{}
	freshAt    int64
	freshFor   int // Demotes since fresh started

	hand sparse.ColdHand // where Demote's scan for cold rows goes on

	filter  *missFilter // every key in the disk tier, and some that left it (filter.go)
	rebuild *Rebuild    // the filter's rebuild out, or nil

	changes changeLog // what changed on disk since the last cut (changes.go)

	stats Stats
	err   error // the first store error; sticky
}

// entry is a change to the store: a row (encoded) or, with row nil, a
// deletion.
//
// The store holds at most one version of a key that is not deleted: a row
// is written when it moves to disk, and deleted when it moves back. Where
// the store may hold an older version (the change replaced a deletion not
// yet written), over says so (pebble writes such a deletion otherwise:
// see pebbleRows.write).
type entry struct {
	row  []byte
	over bool
}

// Stats counts what the tiers have done.
type Stats struct {
	HotRows    int64 // rows in memory
	DiskRows   int64 // rows in the disk tier (written or pending)
	Lookups    int64 // keys looked for in the disk tier (not in memory)
	Hits       int64 // of them, found there and promoted
	Promotions int64 // rows moved into memory
	Demotions  int64 // rows moved to disk
	Evicted    int64 // rows found on disk past their eviction
	Filtered   int64 // of Lookups, keys the miss filter knew were not on disk
	Rebuilds   int64 // rebuilds of the miss filter
	// FilterBytes is the miss filter's memory (beside the budget: about
	// 1.9 bytes per row on disk).
	FilterBytes int64
}

// NewTable makes t the hot tier of a table whose other rows live in s. t
// should be empty or freshly restored: nothing of it is on disk yet.
func NewTable(t *sparse.Table, s *Store) *Table {
	t.KeepTouch()
	t.SmallPages()
	slots := t.Rule().StateSlots()
	tb := &Table{
		hot: t, store: s, prefix: s.next.Add(1),
		stride: t.Dim() * (1 + slots), slots: slots, counts: t.KeepsCount(),
		pend: make(map[uint64]*entry), filter: newMissFilter(0),
		fresh: make(map[uint64]struct{}), old: make(map[uint64]struct{}),
	}
	tb.rows, tb.err = s.table(tb.prefix, tb.rowLen())
	tb.changes.start(t)
	return tb
}

// Hot is the memory tier.
func (t *Table) Hot() *sparse.Table { return t.hot }

// Err is the first store error the table met; once set, the table's rows
// on disk cannot be trusted and the ps must stop.
func (t *Table) Err() error { return t.err }

// Stats returns the table's counters.
func (t *Table) Stats() Stats {
	s := t.stats
	s.HotRows = int64(t.hot.Len())
	s.DiskRows = t.onDisk
	s.FilterBytes = t.filter.bytes()
	return s
}

// rowLen is the length of a row in the store (see encode).
func (t *Table) rowLen() int { return 12 + 4*t.stride }

// RowBytes is the memory a row takes in the hot tier, roughly: key, values,
// state, update count, last touch, and the index's share.
func (t *Table) RowBytes() int64 { return int64(8 + 4*t.stride + 4 + 4 + 6) }

// Fetch moves the rows of keys that are in the disk tier into the hot
// table, so that the table's next Pull, Push or Peek of keys gives what it
// would have if every row had stayed in memory. A row whose last touch is
// older than the table's eviction cutoff is dropped instead. A store error
// is returned, and kept (Err).
func (t *Table) Fetch(keys []uint64) error {
	if t.err != nil {
		return t.err
	}
	if err := t.store.Err(); err != nil {
		t.err = err
		return err
	}
	if err := t.hold(keys); err != nil {
		return err
	}
	if t.onDisk == 0 {
		return nil
	}
	if t.bound == nil {
		// (hold found them otherwise: it demotes no row of keys.)
		t.miss = t.hot.Missing(keys, t.miss[:0])
	}
	if len(t.miss) == 0 {
		return nil
	}
	slices.Sort(t.miss)
	miss := slices.Compact(t.miss)
	t.stats.Lookups += int64(len(miss))
	n := 0
	for _, k := range miss {
		if t.filter.has(k) {
			miss[n] = k
			n++
		}
	}
	t.stats.Filtered += int64(len(miss) - n)
	miss = miss[:n]
	if n == 0 {
		return nil
	}
	snap := sparse.Snapshot{Dim: t.hot.Dim(), State: make([][]float32, t.slots)}
	if t.counts {
		snap.Updates = []uint32{}
	}
	snap.LastTouch = []int64{}
	var changed []bool
	cutoff := t.hot.EvictedBefore()
	// The keys no change in memory covers are read from the store, in one
	// call; rows[i] is then miss[i]'s row, or nil.
	size := t.rowLen()
	rows := make([][]byte, len(miss))
	t.need = t.need[:0]
	for i, k := range miss {
		if e, ok := t.pend[k]; ok {
			rows[i] = e.row
		} else if e, ok := t.flight[k]; ok {
			rows[i] = e.row
		} else {
			t.need = append(t.need, k)
		}
	}
	if len(t.need) > 0 {
		t.found = slices.Grow(t.found[:0], len(t.need)*size)[:len(t.need)*size]
		got := make([]bool, len(t.need))
		var bad error
		err := t.rows.get(t.need, func(i int, row []byte) {
			if len(row) != size && bad == nil {
				bad = fmt.Errorf("key %d: row of %d bytes, want %d", t.need[i], len(row), size)
			}
			copy(t.found[i*size:(i+1)*size], row)
			got[i] = true
		})
		if err == nil {
			err = bad
		}
		if err != nil {
			t.err = fmt.Errorf("%w: reading %s: %w", ErrStore, t.store.dir, err)
			return t.err
		}
		j := 0
		for i, k := range miss {
			if j < len(t.need) && t.need[j] == k {
				if got[j] {
					rows[i] = t.found[j*size : (j+1)*size]
				}
				j++
			}
		}
	}
	for i, k := range miss {
		row := rows[i]
		if row == nil {
			continue
		}
		t.gone(k)
		t.onDisk--
		dirty := t.changes.leave(k)
		touch := int64(binary.LittleEndian.Uint64(row[4:]))
		if touch < cutoff {
			t.stats.Evicted++
			t.changes.dropped(k, touch, t.onDisk)
			continue
		}
		t.stats.Hits++
		t.fresh[k] = struct{}{}
		t.decode(&snap, k, row)
		changed = append(changed, dirty)
	}
	if len(snap.Keys) == 0 {
		return nil
	}
	if err := t.hot.Put(snap, changed); err != nil {
		return err
	}
	t.stats.Promotions += int64(len(snap.Keys))
	return nil
}

// gone records that key's row left the disk tier.
func (t *Table) gone(k uint64) {
	e, ok := t.pend[k]
	switch {
	case !ok:
		// In flight or in the store: one Set for the deletion to meet.
		t.pend[k] = &entry{}
	case e.over:
		// The store may hold an older version.
		t.pend[k] = &entry{over: true}
	default:
		// Never written, and nothing older in the store or in flight.
		delete(t.pend, k)
	}
}

// decode appends key's encoded row to snap.
func (t *Table) decode(snap *sparse.Snapshot, k uint64, row []byte) {
	d := snap.Dim
	snap.Keys = append(snap.Keys, k)
	if snap.Updates != nil {
		snap.Updates = append(snap.Updates, binary.LittleEndian.Uint32(row))
	}
	snap.LastTouch = append(snap.LastTouch, int64(binary.LittleEndian.Uint64(row[4:])))
	f := row[12:]
	at := func(i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(f[4*i:])) }
	for j := range d {
		snap.Values = append(snap.Values, at(j))
	}
	for s := range t.slots {
		for j := range d {
			snap.State[s] = append(snap.State[s], at((s+1)*d+j))
		}
	}
}

// encode is row i of snap as the store keeps it: update count (uint32),
// last touch (int64), then value and state slots (float32), little-endian.
// It appends the row to b, which must have room for it.
func (t *Table) encode(b []byte, snap *sparse.Snapshot, i int) []byte {
	d := snap.Dim
	b = b[:12]
	if snap.Updates != nil {
		binary.LittleEndian.PutUint32(b, snap.Updates[i])
	}
	binary.LittleEndian.PutUint64(b[4:], uint64(snap.LastTouch[i]))
	for _, x := range snap.Values[i*d : (i+1)*d] {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	for _, st := range snap.State {
		for _, x := range st[i*d : (i+1)*d] {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
	}
	return b
}

// Demote moves up to n of the hot table's least recently touched rows to
// the disk tier (into memory pending a write: see StartFlush) and returns
// how many it moved.
//
// Rows promoted at the table's latest step or the one before are left in
// memory (up to 64 Demotes, for pulls that no push follows): most were
// fetched for a pull whose push comes next, and moving them out would bring
// them back at once. So a budget smaller than the rows of the requests in
// progress holds those rows, more than it.
func (t *Table) Demote(n int) int { return t.demoteExcept(n, nil, false) }

// demoteExcept is Demote that leaves the rows of the keys in except too;
// with force, it takes rows promoted lately (not in except) as well.
func (t *Table) demoteExcept(n int, except map[uint64]struct{}, force bool) int {
	if clock := t.hot.Clock(); clock != t.freshAt || t.freshFor >= 64 {
		t.old, t.fresh = t.fresh, t.old
		clear(t.fresh)
		t.freshAt, t.freshFor = clock, 0
	}
	t.freshFor++
	protected := t.fresh
	if force {
		protected = nil
	} else if len(t.old) > 0 {
		protected = maps.Clone(t.fresh)
		maps.Copy(protected, t.old)
	}
	if n <= 0 || t.err != nil {
		return 0
	}
	keys := t.hot.ColdestFrom(&t.hand, n+len(protected)+len(except), nil)
	if len(protected) > 0 || len(except) > 0 {
		keys = slices.DeleteFunc(keys, func(k uint64) bool {
			_, ok := protected[k]
			_, no := except[k]
			return ok || no
		})
		keys = keys[:min(n, len(keys))]
	}
	return t.demoteKeys(keys)
}

// demoteKeys moves the rows of keys to the disk tier.
func (t *Table) demoteKeys(keys []uint64) int {
	snap, changed := t.hot.Take(keys)
	// One allocation for the rows and one for the entries, not two a row.
	size := 12 + 4*t.stride
	rows := make([]byte, len(snap.Keys)*size)
	entries := make([]entry, len(snap.Keys))
	for i, k := range snap.Keys {
		// A deletion still pending, or a change in flight, means the
		// store may hold a version of k when this one is written.
		_, pending := t.pend[k]
		_, flying := t.flight[k]
		e := &entries[i]
		e.row, e.over = t.encode(rows[i*size:(i+1)*size:(i+1)*size], &snap, i), pending || flying
		t.pend[k] = e
		t.filter.add(k)
		if changed[i] {
			t.changes.enter(k, t.onDisk)
		}
	}
	if t.rebuild != nil {
		t.rebuild.later = append(t.rebuild.later, snap.Keys...)
	}
	n := len(snap.Keys)
	t.onDisk += int64(n)
	t.stats.Demotions += int64(n)
	return n
}

// Pending is the number of changes waiting to be written.
func (t *Table) Pending() int { return len(t.pend) }

// batch is how many pending changes the background loop gathers before it
// writes them. The hash store writes a batch page by page, the pages that
// lie close together in spans (hashsweep.go): with about as many changes
// as the file has pages, most pages are changed in one pass over the file,
// at a fraction of a system call a change. The changes pending count in
// the memory bound, so at most half its margin (the table's share of it)
// waits. Pebble writes at once (0).
func (t *Table) batch() int {
	h, ok := t.rows.(*hashFile)
	if !ok || t.bound == nil {
		return 0
	}
	h.mu.RLock()
	pages := int(h.pages)
	h.mu.RUnlock()
	tables := int64(max(1, len(t.bound.tables())))
	return min(pages, int(t.bound.margin/(2*tables*t.RowBytes())))
}

// Flight is a set of changes being written to the store.
type Flight struct {
	t       *Table
	changes map[uint64]*entry
	once    sync.Once // the write, once: by the loop, or by a Fetch that cannot wait (hold)
	err     error     // its result
}

// StartFlush hands the pending changes to a write: call Write on the
// result with no lock held, then EndFlush under the lock. One flight at a
// time; nil if there is nothing to write or a flight is out.
func (t *Table) StartFlush() *Flight {
	if len(t.pend) == 0 || t.flight != nil || t.err != nil {
		return nil
	}
	t.flight, t.pend = t.pend, make(map[uint64]*entry)
	t.flying = &Flight{t: t, changes: t.flight}
	return t.flying
}

// Write writes the flight's changes to the store in one batch. It reads
// only the flight, which no one changes while it is out. The write is
// done once: a second call (a Fetch over the memory bound, see hold, and
// the loop) waits for the first and returns its result.
func (f *Flight) Write() error {
	f.once.Do(func() { f.err = f.write() })
	return f.err
}

func (f *Flight) write() error {
	// Past a failed flush pebble would stall this write for ever.
	if err := f.t.store.Err(); err != nil {
		return err
	}
	ch := make([]change, 0, len(f.changes))
	for _, k := range slices.Sorted(maps.Keys(f.changes)) {
		e := f.changes[k]
		ch = append(ch, change{key: k, row: e.row, over: e.over})
	}
	return f.t.rows.write(ch)
}

// EndFlush ends the flight f, whose Write returned err: the store now
// holds its changes, or, on an error, the table fails (Err).
func (t *Table) EndFlush(f *Flight, err error) {
	if f == nil || t.flying != f {
		return // ended already (hold)
	}
	if err != nil && t.err == nil {
		t.err = err
		if !errors.Is(err, ErrStore) {
			t.err = fmt.Errorf("%w: writing %d rows to %s: %w", ErrStore, len(f.changes), t.store.dir, err)
		}
	}
	t.flight, t.flying = nil, nil
}

// Flush writes the pending changes at once (StartFlush, Write, EndFlush)
// under the caller's lock: for tests and for a shutdown.
func (t *Table) Flush() error {
	f := t.StartFlush()
	if f == nil {
		return t.err
	}
	t.EndFlush(f, f.Write())
	return t.err
}

// ColdRows returns every row of the disk tier, as of now, in key order,
// with rows past eviction left out.
func (t *Table) ColdRows() (sparse.Snapshot, error) {
	c := t.Cut()
	defer c.Release()
	return c.Rows()
}

// Cut is a consistent view of a table's disk tier, taken under the lock
// with the hot table's cut (a store snapshot and the changes not yet
// written), read with no lock held.
type Cut struct {
	t       *Table
	view    rowView
	pend    map[uint64]*entry // pend over flight
	cutoff  int64
	dim     int
	counts  bool
	onDisk  int64
	emptied bool
	err     error // the view could not be taken
}

// Cut takes a view of the disk tier now; Release it when done.
func (t *Table) Cut() *Cut {
	c := &Cut{t: t, cutoff: t.hot.EvictedBefore(), dim: t.hot.Dim(), counts: t.counts, onDisk: t.onDisk}
	if t.onDisk == 0 && len(t.pend) == 0 && t.flight == nil {
		c.emptied = true
		return c
	}
	if t.err != nil {
		c.err = t.err
		return c
	}
	v, err := t.rows.view()
	if err != nil {
		c.err = fmt.Errorf("%w: a view of %s: %w", ErrStore, t.store.dir, err)
		return c
	}
	c.view = v
	c.pend = maps.Clone(t.flight)
	if c.pend == nil {
		c.pend = make(map[uint64]*entry, len(t.pend))
	}
	maps.Copy(c.pend, t.pend)
	return c
}

// Rows reads the cut's rows, ascending by key; rows last touched before
// the eviction cutoff at the cut are left out.
func (c *Cut) Rows() (sparse.Snapshot, error) {
	t := c.t
	snap := sparse.Snapshot{Dim: c.dim, State: make([][]float32, t.slots), LastTouch: []int64{}}
	if c.counts {
		snap.Updates = []uint32{}
	}
	if c.emptied {
		return snap, nil
	}
	if c.err != nil {
		return snap, c.err
	}
	err := c.each(func(k uint64, row []byte) {
		if int64(binary.LittleEndian.Uint64(row[4:])) >= c.cutoff {
			t.decode(&snap, k, row)
		}
	})
	if err != nil {
		return snap, err
	}
	return sortSnapshot(snap), nil
}

// Release lets go of the cut's store snapshot.
func (c *Cut) Release() {
	if c.view != nil {
		c.view.release()
		c.view = nil
	}
}

// Drop deletes every row of the table from the store (its state was
// replaced); the Table must not be used after.
func (t *Table) Drop() error {
	if t.rows == nil {
		return nil
	}
	return t.rows.drop()
}
