package sparse

// Import: rows from a Snapshot into the table; into an empty table (a
// restore) page by page on several cores, checking the keys' order as
// they are copied.

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/paramserv/paramserv/internal/hugemem"
	"github.com/paramserv/paramserv/internal/parallel"
)

// Import stores the rows of s, replacing rows the table already has for the
// same keys and bypassing admission. Restoring a checkpoint is Import into
// a new table; moving keys between shards is Import of several snapshots,
// each filtered to the shard's keys. s must match the table's Dim and
// state slots and have strictly ascending keys. A nil Updates sets the
// counts of imported rows to 0 (a rule that reads step restarts at 1); a
// nil LastTouch stamps them with the latest step seen; into a table that
// already has rows, a LastTouch older than the oldest step the table can
// still represent (see Evict) is recorded as that step. Import checks
// everything, including room under MaxRows, before it changes anything;
// into a table that never had a row (a restore) it checks the keys' order
// as it copies them, and puts the table back as it was if they are not in
// order (ErrUnordered).
func (t *Table) Import(s Snapshot) error {
	if err := t.checkImport(s); err != nil {
		return err
	}
	n := len(s.Keys)
	// A restore's import checks the keys' order as it copies them (see
	// fillPages); any other checks it first.
	restore := t.live == 0 && bulkIndex && t.fillsPages(n)
	if !restore {
		if i := Unordered(s.Keys, t.runner()); i >= 0 {
			return unorderedError(s.Keys, i)
		}
	}
	fresh := n // into an empty table (a restore) every key is new: no lookup
	if t.live > 0 {
		fresh = 0
		for _, k := range s.Keys {
			if r, _ := t.find(k, hashKey(k)); r < 0 {
				fresh++
			}
		}
	}
	if fresh > t.maxRows-t.live {
		return fmt.Errorf("%w: importing %d new rows into %d would pass MaxRows %d", ErrFull, fresh, t.live, t.maxRows)
	}
	var before tableState
	if restore {
		before = t.saveState()
	}
	t.stampImport(s)
	if t.live+fresh > t.maxLive {
		t.grow(t.live + fresh)
	}
	if restore {
		if err := t.fillPages(s); err != nil {
			t.putState(before) // as if the keys had been refused first
			return err
		}
		return nil
	}
	if t.live == 0 && bulkIndex {
		t.importEmpty(s)
		return nil
	}
	for i, k := range s.Keys {
		h := hashKey(k)
		r, pos := t.find(k, h)
		if r < 0 {
			r = t.allocRow(k)
			t.index[pos] = uint32(h)&^t.rowMask | uint32(r+1)
			t.stats.Imported++
		}
		o := r & t.pageMask
		t.pages[r>>t.pageShift].dirty[o>>6] |= 1 << (o & 63)
		t.fillRow(s, i, r)
	}
	return nil
}

// checkImport checks s's shape against the table's, saying what differs.
func (t *Table) checkImport(s Snapshot) error {
	n, d := len(s.Keys), t.dim
	switch {
	case s.Dim != d:
		return fmt.Errorf("%w: Dim %d, table has Dim %d", ErrSnapshot, s.Dim, d)
	case len(s.Values) != n*d:
		return fmt.Errorf("%w: %d keys need %d values, got %d", ErrSnapshot, n, n*d, len(s.Values))
	case len(s.State) != t.slots:
		return fmt.Errorf("%w: %d state slots, rule %q has %d", ErrSnapshot, len(s.State), t.rule.Name(), t.slots)
	case s.Updates != nil && len(s.Updates) != n:
		return fmt.Errorf("%w: %d keys but %d update counts", ErrSnapshot, n, len(s.Updates))
	case s.LastTouch != nil && len(s.LastTouch) != n:
		return fmt.Errorf("%w: %d keys but %d last-touched steps", ErrSnapshot, n, len(s.LastTouch))
	}
	for i, st := range s.State {
		if len(st) != n*d {
			return fmt.Errorf("%w: state slot %d has %d values, want %d", ErrSnapshot, i, len(st), n*d)
		}
	}
	return nil
}

// stampImport sets the table's clock (and, empty, its base) for s's rows
// and starts a new version, as Import does before it copies them.
func (t *Table) stampImport(s Snapshot) {
	n := len(s.Keys)
	if s.LastTouch != nil {
		lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
		for _, st := range s.LastTouch {
			lo, hi = min(lo, st), max(hi, st)
		}
		if n > 0 {
			if t.live == 0 {
				t.base = lo
			}
			t.clock = max(t.clock, hi)
		}
	} else if t.live == 0 {
		t.base = t.clock
	}
	t.bump()
	t.floor = t.mod
}

// ImportAnyOrder is Import of a snapshot whose keys are distinct but in
// any order, as a checkpoint written in table order holds them (see
// InTableOrder). Into a table that never had a row (a restore) row i of s
// becomes row i of the table and the index is built as the rows are
// copied, with no sort: a key that repeats is then found as it is entered
// (ErrDuplicate), and the table is put back as it was. Anywhere else the
// rows are sorted by key first and Import takes them.
func (t *Table) ImportAnyOrder(s Snapshot) error {
	if err := t.checkImport(s); err != nil {
		return err
	}
	n := len(s.Keys)
	if !(t.live == 0 && bulkIndex && t.fillsPages(n)) {
		return t.Import(s.sorted())
	}
	if n > t.maxRows {
		return fmt.Errorf("%w: importing %d new rows into %d would pass MaxRows %d", ErrFull, n, t.live, t.maxRows)
	}
	before := t.saveState()
	t.stampImport(s)
	if n > t.maxLive {
		t.grow(n)
	}
	if err := t.fillPagesAs(s, true, false, false); err != nil {
		t.putState(before)
		return err
	}
	return nil
}

// sorted is s with its rows sorted by key (s itself when they ascend).
func (s Snapshot) sorted() Snapshot {
	if Unordered(s.Keys, nil) < 0 {
		return s
	}
	n, d := len(s.Keys), s.Dim
	order := make([]keyRow, n)
	for i, k := range s.Keys {
		order[i] = keyRow{k, uint32(i)}
	}
	// Not sortKeyRows, which needs distinct keys: a key that repeats
	// stays repeated, and Import refuses it.
	slices.SortFunc(order, func(a, b keyRow) int { return cmp.Compare(a.key, b.key) })
	out := Snapshot{Dim: d, Keys: make([]uint64, n), Values: make([]float32, n*d), State: make([][]float32, len(s.State))}
	for j := range out.State {
		out.State[j] = make([]float32, n*d)
	}
	if s.Updates != nil {
		out.Updates = make([]uint32, n)
	}
	if s.LastTouch != nil {
		out.LastTouch = make([]int64, n)
	}
	for i, e := range order {
		r := int(e.row)
		out.Keys[i] = e.key
		copy(out.Values[i*d:(i+1)*d], s.Values[r*d:(r+1)*d])
		for j, st := range s.State {
			copy(out.State[j][i*d:(i+1)*d], st[r*d:(r+1)*d])
		}
		if s.Updates != nil {
			out.Updates[i] = s.Updates[r]
		}
		if s.LastTouch != nil {
			out.LastTouch[i] = s.LastTouch[r]
		}
	}
	return out
}

// Unordered returns the first index i at which keys are not strictly
// ascending (keys[i] <= keys[i-1]), or -1 if they are. A long list is
// checked in parts that run spreads over the cores (nil: parallel.Serial).
func Unordered(keys []uint64, run parallel.Runner) int {
	run = parallel.Or(run)
	first := func(lo, hi int) int { // the first i in [lo, hi), lo >= 1
		for i := lo; i < hi; i++ {
			if keys[i] <= keys[i-1] {
				return i
			}
		}
		return -1
	}
	parts := min(run.Width(), len(keys)/parallelCheck)
	if parts < 2 {
		return first(1, len(keys))
	}
	// The keys may be a mapped file: the parts fault as the caller
	// would (debug.SetPanicOnFault), and the caller panics with what they
	// panicked with, as if it had read the keys itself.
	onFault := debug.SetPanicOnFault(false)
	debug.SetPanicOnFault(onFault)
	found := make([]int, parts)
	panics := make([]any, parts)
	run.Run(parts, func(c int) {
		defer func() { panics[c] = recover() }()
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(onFault))
		found[c] = first(max(1, len(keys)*c/parts), len(keys)*(c+1)/parts)
	})
	for _, p := range panics {
		if p != nil {
			panic(p)
		}
	}
	for _, i := range found {
		if i >= 0 {
			return i
		}
	}
	return -1
}

// parallelCheck is the number of keys per core from which Unordered checks
// on several.
var parallelCheck = 1 << 18

// bulkIndex: Import into an empty table builds the index in bucket order.
var bulkIndex = true

// tableState is what Import changes before it copies rows: a restore's
// (fillPages) keeps it to put the table back if the copy fails.
type tableState struct {
	base, clock int64
	mod, floor  uint64
	index       []uint32
	indexMem    *hugemem.Mapped[uint32]
	nBuckets    uint64
	maxLive     int
	rowMask     uint32
}

func (t *Table) saveState() tableState {
	return tableState{t.base, t.clock, t.mod, t.floor, t.index, t.indexMem, t.nBuckets, t.maxLive, t.rowMask}
}

func (t *Table) putState(s tableState) {
	t.base, t.clock, t.mod, t.floor, t.index, t.indexMem, t.nBuckets, t.maxLive, t.rowMask = s.base, s.clock, s.mod, s.floor, s.index, s.indexMem, s.nBuckets, s.maxLive, s.rowMask
}

// ErrDuplicate is ImportAnyOrder's error (an ErrSnapshot) for a key that
// comes twice.
var ErrDuplicate = errors.New("a key repeats")

// ErrUnordered is Import's error (an ErrSnapshot) for keys that are not
// strictly ascending.
var ErrUnordered = errors.New("keys not strictly ascending")

func unorderedError(keys []uint64, i int) error {
	return fmt.Errorf("%w: %w at index %d (%d after %d)", ErrSnapshot, ErrUnordered, i, keys[i], keys[i-1])
}

// fillsPages reports whether Import of n rows into the table, which has
// none, is a restore's (fillPages): the table never had a row, and n fill
// at least two pages.
func (t *Table) fillsPages(n int) bool {
	return t.highWater == 0 && len(t.pages) == 0 && n >= 2<<t.pageShift
}

// importEmpty is Import into a table with no rows (checked by the caller,
// with the index grown for every key): it stores the rows in key order and
// then builds the index in one pass in bucket order (see indexRows), which
// writes the index sequentially where inserting key by key would miss the
// cache at every key of a large table. Into a table that never had a row
// (a restore), see fillPages.
func (t *Table) importEmpty(s Snapshot) {
	rows := make([]uint64, len(s.Keys))
	for i, k := range s.Keys {
		r := t.allocRow(k)
		t.stats.Imported++
		t.fillRow(s, i, r)
		rows[i] = t.indexEntry(hashKey(k), r)
	}
	t.indexRows(rows)
}

// fillPages is Import into a table that never had a row (fillsPages),
// with the index grown for every key: row i of s becomes row i of the
// table, and whole pages are filled on every core (the copy is memory
// bandwidth and page faults of fresh memory, which the cores share). As a
// core copies a page's keys it checks that they ascend (instead of a pass
// of Unordered over them first), hashes them and sorts their index
// entries by range of home buckets (scatter), while they are in its
// cache; the index is then built one range per core (indexParts).
//
// An error leaves the table with no rows: keys out of order (reported at
// the first place, as Unordered finds it), or a fault reading s, whose
// memory may be a mapped file that cannot be read (it shrank, or the disk
// failed). Both are ErrSnapshot.
func (t *Table) fillPages(s Snapshot) error { return t.fillPagesAs(s, false, false, false) }

// fillPagesAs is fillPages; with anyOrder the keys may come in any order
// (ImportAnyOrder), and a key that repeats is found as the index is built
// instead of by the order (ErrDuplicate). With indexed (and anyOrder) the
// keys are copied only, and no index is built: the caller has the index
// (ImportIndexed); with inPlace too, the keys of every whole page are not
// copied either: the page's keys are s.Keys' memory (ImportIndexedInPlace).
func (t *Table) fillPagesAs(s Snapshot, anyOrder, indexed, inPlace bool) error {
	n := len(s.Keys)
	pageRows := 1 << t.pageShift
	t.pages = make([]page, (n+pageRows-1)/pageRows)
	// The pages' keys and rows are carved from one allocation each, and
	// with the index backed by huge pages where the system has them: the
	// copy then faults the fresh memory in 2 MiB at a time.
	keys, data := t.slabs(len(t.pages), inPlace)
	rg := t.bucketRanges(indexRanges(n, t.runner().Width()))
	nr := len(rg.lo) - 1
	workers := max(1, min(t.runner().Width(), len(t.pages)))
	// Entries expected per range and worker, with room: the rest spill.
	chunk := n / (nr * workers)
	chunk += chunk/16 + 64
	if indexed {
		nr, chunk = 0, 0
	}
	scat := make([]scatter, workers)
	var next atomic.Int64
	var faulted atomic.Value
	var bad atomic.Int64 // the first row whose key does not ascend; n if none
	bad.Store(int64(n))
	t.runner().Run(workers, func(w int) {
		sc := &scat[w]
		*sc = newScatter(nr, chunk) // each worker its own, zeroed on its core
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r != nil {
				if f, ok := r.(interface{ Addr() uintptr }); !ok || !s.holds(f.Addr()) {
					panic(r) // not the snapshot's memory: a bug
				}
				faulted.CompareAndSwap(nil, fmt.Sprint(r))
				next.Store(int64(len(t.pages))) // the others stop too
			}
		}()
		for {
			pi := int(next.Add(1) - 1)
			if pi >= len(t.pages) {
				return
			}
			lo := pi << t.pageShift
			hi := min(n, lo+pageRows)
			var pk []uint64
			switch {
			case !inPlace:
				pk = keys[pi*pageRows : (pi+1)*pageRows : (pi+1)*pageRows]
			case hi-lo == pageRows:
				pk = s.Keys[lo:hi:hi]
			default: // the last page, part full: its own memory, for the rows to come
				pk = make([]uint64, pageRows)
			}
			t.pages[pi] = t.newPageIn(pk, data[pi*pageRows*t.stride:(pi+1)*pageRows*t.stride:(pi+1)*pageRows*t.stride])
			p := &t.pages[pi]
			var prev uint64
			if lo > 0 {
				prev = s.Keys[lo-1]
			}
			if anyOrder {
				prev = 0
			}
			if indexed {
				if !inPlace || hi-lo < pageRows {
					copy(p.keys[:hi-lo], s.Keys[lo:hi])
				}
			} else if i := t.scatterKeys(sc, p.keys, s.Keys[lo:hi], lo, prev, rg.m, anyOrder); i >= 0 {
				// Pages are taken in order and each is checked up
				// to its first bad key, so the smallest found is
				// the first of all.
				for cur := bad.Load(); int64(i) < cur && !bad.CompareAndSwap(cur, int64(i)); cur = bad.Load() {
				}
				next.Store(int64(len(t.pages))) // the others stop too
				return
			}
			t.fillPage(p, s, lo, hi)
		}
	})
	if f := faulted.Load(); f != nil {
		t.pages = nil
		return fmt.Errorf("%w: reading the rows failed: %v", ErrSnapshot, f)
	}
	if i := int(bad.Load()); i < n {
		t.pages = nil
		return unorderedError(s.Keys, i)
	}
	t.highWater = n
	t.live += n
	t.stats.Imported += int64(n)
	if indexed {
		return nil
	}
	byRange := make([][][]uint64, nr)
	for c := range byRange {
		l := make([][]uint64, 0, 2*workers)
		for _, sc := range scat {
			l = append(l, sc.dst[c*chunk:c*chunk+int(sc.n[c])])
			if len(sc.spill[c]) > 0 {
				l = append(l, sc.spill[c])
			}
		}
		byRange[c] = l
	}
	if dup, again := t.indexParts(byRange, rg, anyOrder); dup >= 0 {
		t.pages, t.highWater, t.live = nil, 0, 0
		t.stats.Imported -= int64(n)
		return fmt.Errorf("%w: %w: key %d at rows %d and %d", ErrSnapshot, ErrDuplicate, s.Keys[dup], min(dup, again), max(dup, again))
	}
	return nil
}

// slabs allocates the keys and rows of np whole pages, each in one
// allocation, backed by huge pages where the system gives them, and the
// index too; with noKeys, the rows only (keys is nil).
func (t *Table) slabs(np int, noKeys bool) (keys []uint64, data []float32) {
	rows := np << t.pageShift
	data = make([]float32, rows*t.stride)
	if !noKeys {
		keys = make([]uint64, rows)
	}
	if rows > 0 {
		if keys != nil {
			adviseHuge(unsafe.Pointer(unsafe.SliceData(keys)), uintptr(len(keys))*8)
		}
		adviseHuge(unsafe.Pointer(unsafe.SliceData(data)), uintptr(len(data))*4)
	}
	if len(t.index) > 0 {
		adviseHuge(unsafe.Pointer(unsafe.SliceData(t.index)), uintptr(len(t.index))*4)
	}
	return keys, data
}

// scatter holds one worker's index entries (indexEntry) sorted by range
// of home buckets: range c's in dst[c*chunk:][:n[c]], and those beyond
// chunk in spill[c]. One flat array and an array of positions, where a
// slice per range costs a slice header's load and store per entry.
type scatter struct {
	dst   []uint64
	n     []int32
	spill [][]uint64
	chunk int32
}

func newScatter(nr, chunk int) scatter {
	return scatter{dst: make([]uint64, nr*chunk), n: make([]int32, nr), spill: make([][]uint64, nr), chunk: int32(chunk)}
}

// scatterKeys copies keys, rows lo.. of a snapshot whose row lo-1 has key
// prev (any for row 0), into to, and sorts their index entries into sc by
// range (rangeMul is bucketRanges' m). It stops at the first key that is
// not above the one before and returns its row, or returns -1; with
// anyOrder it checks no order.
func (t *Table) scatterKeys(sc *scatter, to, keys []uint64, lo int, prev, rangeMul uint64, anyOrder bool) int {
	to = to[:len(keys)]
	nb, mask := t.nBuckets, t.rowMask
	dst, at, chunk := sc.dst, sc.n, sc.chunk
	for o, k := range keys {
		if k <= prev && lo+o > 0 && !anyOrder {
			return lo + o
		}
		prev = k
		to[o] = k
		h := hashKey(k)
		b, _ := bits.Mul64(h, nb)
		e := b<<32 | uint64(uint32(h)&^mask|uint32(lo+o+1)) // indexEntry
		c := (b * rangeMul) >> 32                           // bucketRanges.of
		if a := at[c]; a < chunk {
			dst[int(c)*int(chunk)+int(a)] = e
			at[c] = a + 1
		} else {
			sc.spill[c] = append(sc.spill[c], e)
		}
	}
	return -1
}

// holds reports whether addr is in the memory of s's keys or columns.
func (s Snapshot) holds(addr uintptr) bool {
	in := func(p unsafe.Pointer, size uintptr) bool {
		lo := uintptr(p)
		return size > 0 && addr >= lo && addr-lo < size
	}
	if in(unsafe.Pointer(unsafe.SliceData(s.Keys)), uintptr(len(s.Keys))*8) ||
		in(unsafe.Pointer(unsafe.SliceData(s.Values)), uintptr(len(s.Values))*4) {
		return true
	}
	for _, st := range s.State {
		if in(unsafe.Pointer(unsafe.SliceData(st)), uintptr(len(st))*4) {
			return true
		}
	}
	return false
}

// fillPage copies rows [lo, hi) of s, but for their keys, into p, a new
// page whose first row is row lo, and marks them live (and changed).
func (t *Table) fillPage(p *page, s Snapshot, lo, hi int) {
	m, d, stride := hi-lo, t.dim, t.stride
	for o := 0; o < m; o += 64 {
		bits := ^uint64(0)
		if m-o < 64 {
			bits = 1<<(m-o) - 1
		}
		p.live[o>>6] |= bits
		p.dirty[o>>6] |= bits
	}
	switch {
	case d == 1 && stride == 1:
		copy(p.data, s.Values[lo:hi])
	case d == 1 && stride == 3: // two state slots (FTRL, Adam): one pass, writing in order
		v, a, b := s.Values[lo:hi], s.State[0][lo:hi], s.State[1][lo:hi]
		data := p.data[:3*m]
		for o := range v {
			row := data[3*o : 3*o+3 : 3*o+3]
			row[0], row[1], row[2] = v[o], a[o], b[o]
		}
	case d == 8 && stride == 24: // two state slots: a row a time, in order, 32 bytes a move
		v, a, b := s.Values[lo*8:hi*8], s.State[0][lo*8:hi*8], s.State[1][lo*8:hi*8]
		data := p.data[:24*m]
		for o := range m {
			row := data[24*o : 24*o+24 : 24*o+24]
			*(*[8]float32)(row[0:8]) = *(*[8]float32)(v[8*o : 8*o+8])
			*(*[8]float32)(row[8:16]) = *(*[8]float32)(a[8*o : 8*o+8])
			*(*[8]float32)(row[16:24]) = *(*[8]float32)(b[8*o : 8*o+8])
		}
	default: // a row a time, in order: a column a time would pass over the page once per column
		cols := append([][]float32{s.Values}, s.State...)
		for o := range m {
			row := p.data[o*stride : (o+1)*stride : (o+1)*stride]
			for j, col := range cols {
				if d == 1 { // a copy call per float costs more than the float
					row[j] = col[lo+o]
					continue
				}
				copy(row[j*d:(j+1)*d], col[(lo+o)*d:(lo+o+1)*d])
			}
		}
	}
	if p.count != nil && s.Updates != nil {
		copy(p.count, s.Updates[lo:hi])
	}
	if p.touch != nil {
		for o := range m {
			step := t.clock
			if s.LastTouch != nil {
				step = s.LastTouch[lo+o]
			}
			p.touch[o] = t.rel(step)
		}
	}
}

// fillRow copies row i of s into the table's row r, allocated.
func (t *Table) fillRow(s Snapshot, i, r int) {
	d := t.dim
	t.own(r >> t.pageShift)
	p := &t.pages[r>>t.pageShift]
	o := r & t.pageMask
	row := p.data[o*t.stride : (o+1)*t.stride : (o+1)*t.stride]
	copy(row[:d], s.Values[i*d:(i+1)*d])
	for j, st := range s.State {
		copy(row[(j+1)*d:(j+2)*d], st[i*d:(i+1)*d])
	}
	if p.count != nil {
		p.count[o] = 0
		if s.Updates != nil {
			p.count[o] = s.Updates[i]
		}
	}
	if p.touch != nil {
		step := t.clock
		if s.LastTouch != nil {
			step = s.LastTouch[i]
		}
		p.touch[o] = t.rel(step)
	}
}
