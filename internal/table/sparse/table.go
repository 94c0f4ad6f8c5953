package sparse

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/paramserv/paramserv/internal/hugemem"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/parallel"
)

// Errors returned by this package; each is wrapped with the details, so test
// with errors.Is.
var (
	// ErrConfig: New was given a Config it cannot honour.
	ErrConfig = errors.New("sparse: invalid config")
	// ErrShape: a values or gradients slice does not hold len(keys)*Dim floats.
	ErrShape = errors.New("sparse: slice length does not match keys and Dim")
	// ErrSnapshot: Import was given an inconsistent Snapshot.
	ErrSnapshot = errors.New("sparse: invalid snapshot")
	// ErrFull: Import would take the table past Config.MaxRows.
	ErrFull = errors.New("sparse: table full")
	// ErrNotFinite: CheckPush found a row a push would make NaN or ±Inf.
	ErrNotFinite = errors.New("sparse: the update would not be finite")
)

const (
	// MaxRowsLimit is the most rows one table can hold (row ids are 31 bits).
	MaxRowsLimit = 1<<31 - 1
	// MaxMinCount is the largest admission threshold: the sketch counters
	// are one byte.
	MaxMinCount = 255
	// DefaultSketchWidth is the number of counters per sketch row used when
	// Config.SketchWidth is 0: 4 rows of 1 MiB.
	DefaultSketchWidth = 1 << 20
	// MaxDim bounds Config.Dim.
	MaxDim = 1 << 16
)

// Config describes a table. Only Dim and Rule are required.
type Config struct {
	// Dim is the number of float32 values per row (1 for a logistic
	// regression weight, 8 to 64 for an embedding).
	Dim int
	// Rule updates a row from its gradient. Each row carries
	// Rule.StateSlots() state vectors of Dim floats, initialised by
	// Rule.InitState when the row is created.
	Rule optim.Rule
	// Init gives a new row its value; nil means Zeros. It must be a pure
	// function of the key (see Initializer).
	Init Initializer
	// MinCount is the admission threshold: a key gets a row only once it
	// has been seen MinCount times, counting each occurrence in a Pull or
	// a Push. Until then Pull answers its initial value and Push drops its
	// gradient. 0 and 1 admit every key at once. At most MaxMinCount.
	//
	// Sightings are counted in a count-min sketch of 4 x SketchWidth
	// one-byte counters with conservative update. Under hash collisions it
	// can over-count, so a key may be admitted a little early, never late.
	// Counts are not decayed and not checkpointed: an evicted key that comes
	// back is re-admitted at once, and a restored table counts afresh.
	MinCount int
	// SketchWidth is the number of counters per sketch row; 0 means
	// DefaultSketchWidth. Memory is 4*SketchWidth bytes, allocated only when
	// MinCount > 1. Size it to a few times the number of distinct
	// not-yet-admitted keys expected between restarts.
	SketchWidth int
	// EvictAfterSteps: Evict(step) drops the rows whose last touch is more
	// than EvictAfterSteps global steps before step. 0 never evicts, and
	// then no per-row touch step is stored.
	EvictAfterSteps int64
	// KeepTouch stores each row's last-touched step even when
	// EvictAfterSteps is 0 (4 bytes a row): a disk tier picks the rows it
	// moves out by it (Coldest), and EvictBefore needs it.
	KeepTouch bool
	// MaxRows caps the number of rows; 0 means MaxRowsLimit. A key that
	// would need a row past the cap is treated as not admitted (and counted
	// in Stats.CapacityRejects).
	MaxRows int
}

// StepUser may be implemented by an optim.Rule to say whether Update reads
// its step argument. The table keeps a 4-byte update count per row only for
// rules that do. A rule that does not implement StepUser is assumed to read
// step unless its Name is "sgd", "momentum", "adagrad" or "ftrl"; without a
// count, Update is passed step 1.
type StepUser interface {
	UsesStep() bool
}

var stepFreeRules = map[string]bool{"sgd": true, "momentum": true, "adagrad": true, "ftrl": true}

func usesStep(r optim.Rule) bool {
	if s, ok := r.(StepUser); ok {
		return s.UsesStep()
	}
	return !stepFreeRules[strings.ToLower(r.Name())]
}

// Stats counts what a table has done since New.
type Stats struct {
	Rows            int   // rows held now (Len)
	Admitted        int64 // rows created by Pull or Push
	Imported        int64 // rows created by Import
	RejectedPulls   int64 // key occurrences in Pull answered without a row
	RejectedPushes  int64 // key occurrences in Push whose gradient was dropped
	CapacityRejects int64 // of the rejections, those due to MaxRows
	Evicted         int64 // rows dropped by Evict
	Bytes           int64 // MemoryBytes
}

// Row storage is paged: row r lives in pages[r>>pageShift] at offset
// r&pageMask, so growth allocates one page at a time and never copies rows.
// A page holds 1<<maxPageShift rows, or fewer for wide rows so that its
// floats stay near pageFloats (4 MiB), but at least 1<<minPageShift.
const (
	maxPageShift  = 13
	minPageShift  = 6
	pageFloats    = 1 << 20
	firstPageRows = 16 // page 0 starts this small and doubles, for small tables
)

// page holds up to 1<<pageShift rows in flat arrays.
type page struct {
	keys []uint64 // key of each row; for a free row, 1 + the next free row (0 ends the list)
	// data holds each row's value then its state slots, stride
	// Dim*(1+slots) floats, so one update touches one contiguous span.
	data  []float32
	touch []uint32 // last-touched step minus Table.base; nil when eviction is off
	count []uint32 // updates applied (saturating); nil when the rule ignores step
	live  []uint64 // bitmap: row in use
	dirty []uint64 // bitmap: row created or changed since the last ResetChanges (changes.go)
	ver   []uint64 // version of each row's last change (versions.go); nil until EnableVersions
}

// Table is not safe for concurrent use: it holds no lock, and the server
// serialises every call on a table (one goroutine owns it). Slices passed
// in are read or written only during the call.
//
// A Table holds rows of Dim float32 values keyed by uint64 ids, each with
// the optimizer state of its Rule.
//
// Memory. Keys, values and state live in flat arrays in pages of up to 8192
// rows (keys []uint64; values and state interleaved in one []float32), with
// an optional uint32 last-touched step and uint32 update count per row, and
// one-bit liveness and dirty bitmaps (changes.go). An open-addressing
// index of uint32 slots, in buckets of 16 (one cache line), maps a key's hash to its row; each slot
// holds the row id in its low bits and spare hash bits (a tag) in its high
// bits, so a probe reads a key only on a tag match. The index is kept
// between 72% and 90% full and grows by 1.25x, so it costs 4.4 to 5.6 bytes
// per row; a large table's growth moves the rows into the grown index a
// few at a time as new rows come (holding both indexes meanwhile, for the
// first eighth of the growth), so no call waits for a rebuild. An index of
// 1 MiB or more is mapped outside the Go heap, and the old one is unmapped
// as its last row moves. Calls over many keys ask for each key's index
// bucket, key and row some keys ahead, so that the cache misses of several
// keys overlap (index.go). Rows freed by Evict are reused by the next new
// keys; the pages' memory is not returned to the runtime.
type Table struct {
	dim, slots, stride int
	rule               optim.Rule
	init               Initializer
	minCount           int
	evictAfter         int64
	maxRows            int
	keepTouch          bool
	keepCount          bool

	// Index: nBuckets buckets of bucketSlots uint32 slots. A slot is 0 when
	// empty, else tag | (row+1), the tag being the bits of the key's hash
	// above rowMask.
	index    []uint32
	indexMem *hugemem.Mapped[uint32] // index's memory when mapped (setIndex); nil on the heap or taken (adoptIndex)
	nBuckets uint64
	rowMask  uint32
	maxLive  int      // grow the index before live exceeds this
	old      oldIndex // while the index grows incrementally (index.go)

	pages     []page
	pageShift int // rows per page = 1<<pageShift
	pageMask  int
	highWater int // rows ever allocated: row ids are < highWater
	freeHead  int // first free row below highWater, -1 if none
	live      int

	sketch *sketch // nil when MinCount <= 1

	// Steps: touch values are relative to base; clock is the largest step
	// seen (by Push or Evict) and stamps the rows Pull creates.
	base, clock int64
	cutoff      int64 // the largest eviction cutoff applied (tier.go)

	stats Stats
	views [][]float32 // scratch: state slices of the row being updated
	trial trial       // scratch of CheckPush (finite.go)

	// par runs the large jobs (Export, Sorted, Import into an empty
	// table, Frozen) on several cores: parallel.Serial until SetParallel.
	par parallel.Runner

	// Key sets (keyset.go): gen counts the times rows were freed, so a
	// KeySet's remembered row ids are valid while it is unchanged; mark and
	// scratch are reused by PushSet.
	gen     uint64
	mark    []uint64
	scratch []float32
	group   []uint64 // pushCounted's batch ordered by update count

	// Changes (changes.go): the keys Evict dropped since the last
	// ResetChanges, recorded once tracking is on; changesLost when more
	// were dropped than the list keeps.
	tracking    bool
	deleted     []uint64
	changesLost bool

	// Versions (versions.go): mod counts the calls that may change values
	// once versions are on; freeVer is mod when a row was last freed, floor
	// mod at the last Import.
	versions     bool
	oldVal       []float32 // scratch: a row's value before an update
	mod, freeVer uint64
	floor        uint64

	// Copy-on-write (shared.go): cow while copies share this table's
	// pages; frozenOf in such a copy.
	cow      tableCOW
	frozenOf *cowRef
	saved    *SavedIndex // in such a copy: the table's index, when it took one (index_saved.go)
	// held: memory the table took from a restore (ImportIndexedInPlace),
	// released once no table points to it; shared by the copies.
	held *heldMemory
}

// New returns an empty table for cfg.
func New(cfg Config) (*Table, error) {
	switch {
	case cfg.Dim < 1 || cfg.Dim > MaxDim:
		return nil, fmt.Errorf("%w: Dim %d (want 1 to %d)", ErrConfig, cfg.Dim, MaxDim)
	case cfg.Rule == nil:
		return nil, fmt.Errorf("%w: Rule is nil (want an optim.Rule, e.g. from optim.New)", ErrConfig)
	case cfg.Rule.StateSlots() < 0:
		return nil, fmt.Errorf("%w: rule %q has %d state slots", ErrConfig, cfg.Rule.Name(), cfg.Rule.StateSlots())
	case cfg.MinCount < 0 || cfg.MinCount > MaxMinCount:
		return nil, fmt.Errorf("%w: MinCount %d (want 0 to %d)", ErrConfig, cfg.MinCount, MaxMinCount)
	case cfg.SketchWidth < 0 || cfg.SketchWidth > 1<<30:
		return nil, fmt.Errorf("%w: SketchWidth %d (want 0 for the default, or 1 to 2^30)", ErrConfig, cfg.SketchWidth)
	case cfg.EvictAfterSteps < 0:
		return nil, fmt.Errorf("%w: EvictAfterSteps %d (want >= 0; 0 never evicts)", ErrConfig, cfg.EvictAfterSteps)
	case cfg.MaxRows < 0 || cfg.MaxRows > MaxRowsLimit:
		return nil, fmt.Errorf("%w: MaxRows %d (want 0 for no cap, or 1 to %d)", ErrConfig, cfg.MaxRows, MaxRowsLimit)
	}
	if v, ok := cfg.Init.(validator); ok {
		if err := v.Validate(); err != nil {
			return nil, err
		}
	}
	slots := cfg.Rule.StateSlots()
	stride := int64(cfg.Dim) * int64(1+slots)
	if stride<<minPageShift > math.MaxInt32 {
		return nil, fmt.Errorf("%w: Dim %d with %d state slots makes rows too wide", ErrConfig, cfg.Dim, slots)
	}
	shift := maxPageShift
	for shift > minPageShift && stride<<shift > pageFloats {
		shift--
	}
	t := &Table{
		dim:        cfg.Dim,
		slots:      slots,
		stride:     cfg.Dim * (1 + slots),
		rule:       cfg.Rule,
		init:       cfg.Init,
		minCount:   cfg.MinCount,
		evictAfter: cfg.EvictAfterSteps,
		maxRows:    cfg.MaxRows,
		keepTouch:  cfg.EvictAfterSteps > 0 || cfg.KeepTouch,
		keepCount:  usesStep(cfg.Rule),
		freeHead:   -1,
		pageShift:  shift,
		pageMask:   1<<shift - 1,
		views:      make([][]float32, slots),
	}
	if t.init == nil {
		t.init = Zeros{}
	}
	if t.maxRows == 0 {
		t.maxRows = MaxRowsLimit
	}
	if cfg.MinCount > 1 {
		w := cfg.SketchWidth
		if w == 0 {
			w = DefaultSketchWidth
		}
		t.sketch = newSketch(w)
	}
	t.setIndex(1)
	return t, nil
}

// Dim is the number of values per row.
func (t *Table) Dim() int { return t.dim }

// Rule is the table's update rule.
func (t *Table) Rule() optim.Rule { return t.rule }

// SetRule replaces the update rule by one of the same name and state
// slots whose use of the step is the same (another learning rate: a job
// restarted with changed flags, or a schedule's rate, optim.WithRate); the
// rows and their state stay.
func (t *Table) SetRule(r optim.Rule) error {
	if r == nil || r.Name() != t.rule.Name() || r.StateSlots() != t.slots || usesStep(r) != t.keepCount {
		return fmt.Errorf("%w: rule %v cannot replace %s with %d state slots", ErrConfig, r, t.rule.Name(), t.slots)
	}
	t.rule = r
	return nil
}

// Len is the number of rows held.
func (t *Table) Len() int { return t.live }

// Stats returns the table's counters.
func (t *Table) Stats() Stats {
	s := t.stats
	s.Rows = t.live
	s.Bytes = t.MemoryBytes()
	return s
}

// MemoryBytes is the memory the table holds: the capacity of its index, row
// pages, bitmap and sketch, plus its fixed headers.
func (t *Table) MemoryBytes() int64 {
	const hdr = int64(unsafe.Sizeof([]byte(nil)))
	n := int64(unsafe.Sizeof(*t)) + 4*int64(cap(t.index)) + 4*int64(cap(t.old.slots)) + hdr*int64(cap(t.views)) + 8*int64(cap(t.mark)) + 8*int64(cap(t.group)) + 4*int64(cap(t.scratch))
	n += int64(cap(t.pages)) * int64(unsafe.Sizeof(page{}))
	for i := range t.pages {
		p := &t.pages[i]
		n += 8*int64(cap(p.keys)) + 4*int64(cap(p.data)) + 4*int64(cap(p.touch)) +
			4*int64(cap(p.count)) + 8*int64(cap(p.live)) + 8*int64(cap(p.dirty))
	}
	if t.sketch != nil {
		n += int64(unsafe.Sizeof(*t.sketch)) + int64(cap(t.sketch.cells))
	}
	return n
}

// Pull writes the value of each key to out, row i at out[i*Dim:(i+1)*Dim].
// A key with no row is first counted for admission; once admitted it gets a
// row (from Init, stamped with the latest step seen) which Pull then reads.
// A key not admitted reads as its initial value and no row is stored. Pull
// does not refresh the last-touched step of existing rows; Push does.
// Repeated keys are allowed. len(out) must be len(keys)*Dim.
func (t *Table) Pull(keys []uint64, out []float32) error {
	d := t.dim
	if len(out) != len(keys)*d {
		return fmt.Errorf("%w: Pull of %d keys with Dim %d needs %d floats, got %d", ErrShape, len(keys), d, len(keys)*d, len(out))
	}
	var la lookahead
	la.start(t, keys)
	for i, k := range keys {
		dst := out[i*d : (i+1)*d : (i+1)*d]
		r := t.acquire(k, la.at(t, i), t.clock)
		if r < 0 {
			t.stats.RejectedPulls++
			t.init.Init(k, dst)
			continue
		}
		p := &t.pages[r>>t.pageShift]
		o := (r & t.pageMask) * t.stride
		copy(dst, p.data[o:o+d])
	}
	return nil
}

// Push applies grads to the rows of keys with the table's Rule, row i's
// gradient at grads[i*Dim:(i+1)*Dim]. A key with no row is counted for
// admission and, once admitted, gets a fresh row that the gradient then
// updates; a gradient for a key not admitted is dropped. step is the
// server's global step. Each updated row records as its last touch the
// latest step the table has seen (step, or a later one given to an earlier
// Push or Evict), so a stale step never makes a row look older. The rule's
// own step argument is the row's count of updates, 1 for the first.
//
// Keys should be distinct (the caller sums the gradients of a repeated
// key); a repeated key is updated once per occurrence, in order.
// len(grads) must be len(keys)*Dim.
func (t *Table) Push(keys []uint64, grads []float32, step int64) error {
	d := t.dim
	if len(grads) != len(keys)*d {
		return fmt.Errorf("%w: Push of %d keys with Dim %d needs %d floats, got %d", ErrShape, len(keys), d, len(keys)*d, len(grads))
	}
	t.clock = max(t.clock, step)
	t.bump()
	var la lookahead
	la.start(t, keys)
	for i, k := range keys {
		r := t.acquire(k, la.at(t, i), t.clock)
		if r < 0 {
			t.stats.RejectedPushes++
			continue
		}
		t.updateRow(r, grads[i*d:(i+1)*d:(i+1)*d], t.rel(t.clock))
	}
	return nil
}

// Evict drops every row whose last touch is more than EvictAfterSteps
// steps before globalStep, and returns how many it dropped; with
// EvictAfterSteps 0 it drops none. It scans all rows, so call it every so
// many steps rather than every step. Last-touched steps are stored as
// uint32 offsets from a base that Evict moves forward; they stay exact as
// long as Evict runs at least once every 2^32 steps.
func (t *Table) Evict(globalStep int64) int {
	t.clock = max(t.clock, globalStep)
	t.bump()
	if t.evictAfter == 0 {
		return 0
	}
	return t.evictBefore(globalStep - t.evictAfter)
}

// EvictBefore drops every row last touched before step cutoff (a cutoff
// found another way than EvictAfterSteps, such as from wall-clock time),
// and returns how many it dropped. The table must keep last-touched steps
// (Config.KeepTouch); without them it drops none.
func (t *Table) EvictBefore(cutoff int64) int {
	t.bump()
	if !t.keepTouch {
		return 0
	}
	return t.evictBefore(cutoff)
}

func (t *Table) evictBefore(cutoff int64) int {
	t.cutoff = max(t.cutoff, cutoff)
	if t.live == 0 || cutoff <= t.base { // rows touched before cutoff go
		return 0
	}
	relCut := cutoff - t.base
	victim := func(tc uint32) bool { return tc != math.MaxUint32 && int64(tc) < relCut }

	victims := 0
	for pi := range t.pages {
		p := &t.pages[pi]
		for o, tc := range p.touch {
			if victim(tc) && p.live[o>>6]&(1<<(o&63)) != 0 {
				victims++
			}
		}
	}
	// Deleting a key from the index shifts back the entries after it, which
	// reads their keys; past a few percent it is cheaper to rebuild.
	bulk := victims > t.live/16
	for pi := range t.pages {
		t.own(pi) // every live row's touch is rebased or the row freed
		p := &t.pages[pi]
		for o, tc := range p.touch {
			if p.live[o>>6]&(1<<(o&63)) == 0 {
				continue
			}
			if !victim(tc) {
				if tc != math.MaxUint32 {
					p.touch[o] = tc - uint32(relCut) // relCut <= tc here
				}
				continue
			}
			r := pi<<t.pageShift | o
			if !bulk {
				_, pos := t.find(p.keys[o], hashKey(p.keys[o]))
				t.deleteSlot(pos)
			}
			t.freeRow(r)
		}
	}
	if bulk {
		t.rebuild()
	}
	t.base = cutoff
	t.stats.Evicted += int64(victims)
	return victims
}

// rel converts a global step to a stored touch value.
func (t *Table) rel(step int64) uint32 {
	return uint32(min(max(step-t.base, 0), math.MaxUint32))
}

// acquire returns key's row, creating it if key is (now) admitted and the
// table has room, or -1. h is key's hash; step stamps a created row.
func (t *Table) acquire(key, h uint64, step int64) int {
	r, pos := t.find(key, h)
	if r >= 0 {
		return r
	}
	if t.sketch != nil && !t.sketch.see(key, t.minCount) {
		return -1
	}
	if t.live >= t.maxRows {
		t.stats.CapacityRejects++
		return -1
	}
	if t.live >= t.maxLive {
		t.grow(t.live + 1)
		_, pos = t.find(key, h)
	}
	if t.live == 0 {
		t.base = step
	}
	r = t.allocRow(key)
	t.index[pos] = t.slotOf(h, r)
	if t.old.slots != nil {
		t.migrate(migrateRows)
	}
	t.resetRow(r, key, step)
	t.stats.Admitted++
	return r
}

// allocRow allocates a row for key, reusing a freed one first.
func (t *Table) allocRow(key uint64) int {
	var r int
	if t.freeHead >= 0 {
		r = t.freeHead
		t.freeHead = int(t.pages[r>>t.pageShift].keys[r&t.pageMask]) - 1
	} else {
		r = t.highWater
		t.highWater++
		t.ensurePage(r)
	}
	t.live++
	t.own(r >> t.pageShift)
	p := &t.pages[r>>t.pageShift]
	o := r & t.pageMask
	p.keys[o] = key
	p.live[o>>6] |= 1 << (o & 63)
	p.dirty[o>>6] |= 1 << (o & 63)
	if p.ver != nil {
		// A new row holds the key's initial value, which the key read
		// before it had a row: unchanged since the last time a key could
		// have lost a trained value (versions.go).
		p.ver[o] = t.freeVer
	}
	return r
}

// resetRow gives row r its initial value and state, stamped with step.
func (t *Table) resetRow(r int, key uint64, step int64) {
	t.own(r >> t.pageShift)
	p := &t.pages[r>>t.pageShift]
	o := r & t.pageMask
	row := p.data[o*t.stride : (o+1)*t.stride : (o+1)*t.stride]
	t.init.Init(key, row[:t.dim:t.dim])
	if t.slots > 0 {
		clear(row[t.dim:])
		for s := range t.views {
			t.views[s] = row[(s+1)*t.dim : (s+2)*t.dim : (s+2)*t.dim]
		}
		t.rule.InitState(t.views)
	}
	if p.count != nil {
		p.count[o] = 0
	}
	if p.touch != nil {
		p.touch[o] = t.rel(step)
	}
}

// freeRow puts row r, already removed from the index, on the free list.
func (t *Table) freeRow(r int) {
	t.own(r >> t.pageShift)
	p := &t.pages[r>>t.pageShift]
	o := r & t.pageMask
	p.live[o>>6] &^= 1 << (o & 63)
	p.dirty[o>>6] &^= 1 << (o & 63)
	t.recordDeleted(p.keys[o])
	p.keys[o] = uint64(t.freeHead + 1)
	t.freeHead = r
	t.live--
	t.gen++
	t.freeVer = t.mod
}

// ensurePage makes row r (== highWater-1) addressable: it allocates the
// next page, or doubles page 0 while the table is small.
func (t *Table) ensurePage(r int) {
	pi, o := r>>t.pageShift, r&t.pageMask
	if pi == len(t.pages) {
		n := 1 << t.pageShift
		if pi == 0 {
			n = min(firstPageRows, n)
		}
		t.pages = append(t.pages, t.newPage(n))
		return
	}
	p := &t.pages[pi]
	if o < len(p.keys) {
		return
	}
	np := t.newPage(min(2*len(p.keys), 1<<t.pageShift))
	copy(np.keys, p.keys)
	copy(np.data, p.data)
	copy(np.touch, p.touch)
	copy(np.count, p.count)
	copy(np.live, p.live)
	copy(np.dirty, p.dirty)
	copy(np.ver, p.ver)
	*p = np
	t.disown(pi) // a copy may share the old memory, not this
}

func (t *Table) newPage(rows int) page {
	return t.newPageIn(make([]uint64, rows), make([]float32, rows*t.stride))
}

// newPageIn is newPage with the memory of its keys and rows given, zeroed:
// len(keys) rows.
func (t *Table) newPageIn(keys []uint64, data []float32) page {
	rows := len(keys)
	p := page{
		keys:  keys,
		data:  data,
		live:  make([]uint64, (rows+63)/64),
		dirty: make([]uint64, (rows+63)/64),
	}
	if t.keepTouch {
		p.touch = make([]uint32, rows)
	}
	if t.keepCount {
		p.count = make([]uint32, rows)
	}
	if t.versions {
		p.ver = make([]uint64, rows)
	}
	return p
}

// forLive calls fn for every live row in row-id order.
func (t *Table) forLive(fn func(r int, p *page, o int)) {
	for pi := range t.pages {
		p := &t.pages[pi]
		for w, bitsw := range p.live {
			for bitsw != 0 {
				b := trailingZeros(bitsw)
				bitsw &= bitsw - 1
				o := w<<6 | b
				fn(pi<<t.pageShift|o, p, o)
			}
		}
	}
}

// SetParallel makes run the Runner of the table's large jobs (Export,
// Sorted, Import into an empty table, Frozen and FrozenSize.Alloc), which
// spread them over the cores; the table's Frozen copies inherit it. nil is
// parallel.Serial, the default: the package starts no goroutine of its
// own. The result of every job is the same whatever the Runner.
func (t *Table) SetParallel(run parallel.Runner) { t.par = run }

// runner is the table's Runner: SetParallel's, else defaultRunner.
func (t *Table) runner() parallel.Runner {
	if t.par != nil {
		return t.par
	}
	return defaultRunner
}

// defaultRunner runs the jobs of a table SetParallel was not called on:
// parallel.Serial. The package's tests make it run on goroutines, so that
// the race detector sees the parallel paths.
var defaultRunner = parallel.Serial

// CountMissing returns how many of keys have no row (a repeated key counts each
// time): the most rows a Push of keys could add. It changes nothing, not
// even admission counts.
func (t *Table) CountMissing(keys []uint64) int {
	n := 0
	for _, k := range keys {
		if t.lookup(k, hashKey(k)) < 0 {
			n++
		}
	}
	return n
}

// MaxRows is the cap on rows (Config.MaxRows; MaxRowsLimit if none was set).
func (t *Table) MaxRows() int { return t.maxRows }

// SetMaxRows sets the cap on rows as Config.MaxRows does (0: MaxRowsLimit).
// A table already holding more keeps them and adds no row until it holds
// fewer.
func (t *Table) SetMaxRows(n int) error {
	if n < 0 || n > MaxRowsLimit {
		return fmt.Errorf("%w: MaxRows %d (want 0 for no cap, or 1 to %d)", ErrConfig, n, MaxRowsLimit)
	}
	if n == 0 {
		n = MaxRowsLimit
	}
	t.maxRows = n
	return nil
}
