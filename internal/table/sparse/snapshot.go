package sparse

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/bits"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/paramserv/paramserv/internal/parallel"
)

// Row is one row as All yields it. Value and State alias the table's
// storage, and the State slice itself is reused from row to row: copy what
// you keep, and do not change the table while iterating.
type Row struct {
	Key       uint64
	Value     []float32   // Dim values
	State     [][]float32 // Rule.StateSlots() slices of Dim values
	Updates   uint32      // updates applied to the row; 0 when the table keeps no count
	LastTouch int64       // global step of the last touch; 0 when eviction is off
}

// All yields every row in ascending key order. Sorting takes 16 bytes per
// row of scratch memory for the duration of the iteration.
func (t *Table) All() iter.Seq[Row] {
	return func(yield func(Row) bool) {
		type kr struct {
			key uint64
			row int
		}
		order := make([]kr, 0, t.live)
		t.forLive(func(r int, p *page, o int) { order = append(order, kr{p.keys[o], r}) })
		slices.SortFunc(order, func(a, b kr) int { return cmp.Compare(a.key, b.key) })
		d := t.dim
		views := make([][]float32, t.slots)
		for _, e := range order {
			p := &t.pages[e.row>>t.pageShift]
			o := e.row & t.pageMask
			row := p.data[o*t.stride : (o+1)*t.stride : (o+1)*t.stride]
			for s := range views {
				views[s] = row[(s+1)*d : (s+2)*d : (s+2)*d]
			}
			r := Row{Key: e.key, Value: row[:d:d], State: views}
			if p.count != nil {
				r.Updates = p.count[o]
			}
			if p.touch != nil {
				r.LastTouch = t.base + int64(p.touch[o])
			}
			if !yield(r) {
				return
			}
		}
	}
}

// Snapshot is a copy of a table's rows for a checkpoint, in ascending key
// order. Row i's value is Values[i*Dim:(i+1)*Dim], and likewise in each
// State slot.
type Snapshot struct {
	Dim       int
	Keys      []uint64    // strictly ascending
	Values    []float32   // len(Keys)*Dim
	State     [][]float32 // Rule.StateSlots() slices, each len(Keys)*Dim
	Updates   []uint32    // per-row update counts; nil if the table keeps none
	LastTouch []int64     // per-row last-touched step; nil if eviction is off
}

// Export copies every row, with its optimizer state, into a Snapshot.
// Admission counts are not exported.
func (t *Table) Export() Snapshot {
	s := t.emptySnapshot()
	if t.live >= parallelExport {
		t.exportParallel(&s)
		return s
	}
	for r := range t.All() {
		s.Keys = append(s.Keys, r.Key)
		s.Values = append(s.Values, r.Value...)
		for i, st := range r.State {
			s.State[i] = append(s.State[i], st...)
		}
		if s.Updates != nil {
			s.Updates = append(s.Updates, r.Updates)
		}
		if s.LastTouch != nil {
			s.LastTouch = append(s.LastTouch, r.LastTouch)
		}
	}
	return s
}

// emptySnapshot is a Snapshot of the table's shape with no rows and room
// for every row.
func (t *Table) emptySnapshot() Snapshot {
	n, d := t.live, t.dim
	s := Snapshot{
		Dim:    d,
		Keys:   make([]uint64, 0, n),
		Values: make([]float32, 0, n*d),
		State:  make([][]float32, t.slots),
	}
	for i := range s.State {
		s.State[i] = make([]float32, 0, n*d)
	}
	if t.keepCount {
		s.Updates = make([]uint32, 0, n)
	}
	if t.keepTouch {
		s.LastTouch = make([]int64, 0, n)
	}
	return s
}

// parallelExport is the number of rows from which Export sorts and copies
// on every core.
var parallelExport = 1 << 16

// exportParallel is Export's loop for a large table: the live rows are
// sorted by key in one part per core, the parts merged, and each core
// copies its range of the sorted rows into s (allocated with capacity for
// every row, empty).
func (t *Table) exportParallel(s *Snapshot) {
	procs := max(1, min(t.runner().Width(), 8))
	t.gather(s, t.sortedRows(procs), procs)
}

// gather copies the rows of order (sorted) into s (allocated with
// capacity for every row, empty), each of procs cores a range of them.
func (t *Table) gather(s *Snapshot, order []keyRow, procs int) {
	n, d := len(order), t.dim

	s.Keys = s.Keys[:n]
	s.Values = s.Values[:n*d]
	for i := range s.State {
		s.State[i] = s.State[i][:n*d]
	}
	if s.Updates != nil {
		s.Updates = s.Updates[:n]
	}
	if s.LastTouch != nil {
		s.LastTouch = s.LastTouch[:n]
	}
	t.runner().Run(procs, func(c int) {
		lo, hi := n*c/procs, n*(c+1)/procs
		{
			for i := lo; i < hi; i++ {
				e := order[i]
				r := int(e.row)
				p := &t.pages[r>>t.pageShift]
				o := r & t.pageMask
				row := p.data[o*t.stride : (o+1)*t.stride : (o+1)*t.stride]
				s.Keys[i] = e.key
				if d == 1 { // a copy call per float costs more than the float
					s.Values[i] = row[0]
					for j := range s.State {
						s.State[j][i] = row[j+1]
					}
				} else {
					copy(s.Values[i*d:(i+1)*d], row[:d])
					for j := range s.State {
						copy(s.State[j][i*d:(i+1)*d], row[(j+1)*d:(j+2)*d])
					}
				}
				if s.Updates != nil && p.count != nil {
					s.Updates[i] = p.count[o]
				}
				if s.LastTouch != nil && p.touch != nil {
					s.LastTouch[i] = t.base + int64(p.touch[o])
				}
			}
		}
	})
}

type keyRow struct {
	key uint64
	row uint32
}

// sortedRows returns the live rows sorted by key, collected and sorted on
// procs cores. The rows are bucketed by their keys' leading bits as they
// are collected (a radix sort's first pass: the bits are those below the
// highest bit in which the smallest and the largest key differ, so keys in
// any range spread), and each bucket is then sorted in the cache
// (sortKeyRows). Rows already in key order, as a restored table's are,
// are collected as they are.
func (t *Table) sortedRows(procs int) []keyRow {
	order, _ := t.sortRows(procs)
	return order
}

// sortRows is sortedRows, also reporting whether the rows were in key
// order already (then order's rows ascend too).
func (t *Table) sortRows(procs int) (order []keyRow, inPlace bool) {
	// Each worker takes a run of whole pages.
	procs = max(1, min(procs, len(t.pages)))
	pageLo := make([]int, procs+1)
	for w := range pageLo {
		pageLo[w] = len(t.pages) * w / procs
	}
	each := func(f func(w int)) { t.runner().Run(procs, f) }
	live := func(w int, f func(k uint64, r int)) {
		for pi := pageLo[w]; pi < pageLo[w+1]; pi++ {
			p := &t.pages[pi]
			for wi, bitsw := range p.live {
				for bitsw != 0 {
					o := wi<<6 | trailingZeros(bitsw)
					bitsw &= bitsw - 1
					f(p.keys[o], pi<<t.pageShift|o)
				}
			}
		}
	}
	// Pass 1: each run's rows, smallest and largest key, and whether its
	// keys ascend in row order.
	type runInfo struct {
		n               int
		lo, hi          uint64 // smallest, largest
		first, last     uint64
		ascending, some bool
	}
	runs := make([]runInfo, procs)
	each(func(w int) {
		ri := runInfo{lo: math.MaxUint64, ascending: true}
		live(w, func(k uint64, _ int) {
			if ri.some && k <= ri.last {
				ri.ascending = false
			}
			if !ri.some {
				ri.first, ri.some = k, true
			}
			ri.last = k
			ri.lo, ri.hi = min(ri.lo, k), max(ri.hi, k)
			ri.n++
		})
		runs[w] = ri
	})
	n := 0
	lo, hi := uint64(math.MaxUint64), uint64(0)
	ascending := true
	var prev *runInfo
	for w := range runs {
		ri := &runs[w]
		n += ri.n
		if !ri.some {
			continue
		}
		lo, hi = min(lo, ri.lo), max(hi, ri.hi)
		ascending = ascending && ri.ascending && (prev == nil || prev.last < ri.first)
		prev = ri
	}
	order = make([]keyRow, n)
	if ascending {
		each(func(w int) {
			i := 0
			for v := range w {
				i += runs[v].n
			}
			live(w, func(k uint64, r int) {
				order[i] = keyRow{k, uint32(r)}
				i++
			})
		})
		return order, true
	}
	// Pass 2: how many rows of each run fall in each bucket; pass 3: each
	// run puts its rows into their buckets, in row order.
	top := bits.Len64(lo ^ hi)
	digit := min(top, max(1, bits.Len(uint(n/2048))), 12)
	shift := uint(top - digit)
	mask := uint64(1)<<digit - 1
	counts := make([][]int, procs)
	each(func(w int) {
		c := make([]int, mask+1)
		live(w, func(k uint64, _ int) { c[(k>>shift)&mask]++ })
		counts[w] = c
	})
	start := make([]int, mask+2) // bucket b is order[start[b]:start[b+1]]
	for b := range mask + 1 {
		at := start[b]
		for w := range procs {
			at, counts[w][b] = at+counts[w][b], at // now where run w's rows go
		}
		start[b+1] = at
	}
	each(func(w int) {
		at := counts[w]
		live(w, func(k uint64, r int) {
			b := (k >> shift) & mask
			order[at[b]] = keyRow{k, uint32(r)}
			at[b]++
		})
	})
	var next atomic.Int64
	each(func(int) {
		var scratch []keyRow
		for {
			b := int(next.Add(1) - 1)
			if b > int(mask) {
				return
			}
			scratch = sortKeyRows(order[start[b]:start[b+1]], scratch)
		}
	})
	return order, false
}

// Sorted is a table's rows in ascending key order, read a range at a
// time: a checkpoint streams them to its file (checkpoint.Tensor.Fill)
// instead of copying them all into a Snapshot first. Its methods may be
// called from several goroutines at once. The table must not change while
// it is in use: it is meant for a Frozen copy.
type Sorted struct {
	t       *Table
	order   []keyRow // nil when dense
	inPlace bool
	// dense: no row was ever freed and the rows are in key order, so the
	// i-th row in key order is row i (a restored table that gained no
	// rows): no order is kept, and rows are read in runs.
	dense bool
}

// Sorted sorts the table's rows by key, on every core (as Export does),
// and returns the view of them in that order.
func (t *Table) Sorted() *Sorted {
	if t.live == t.highWater && t.rowsAscend() {
		return &Sorted{t: t, inPlace: true, dense: true}
	}
	order, inPlace := t.sortRows(max(1, min(t.runner().Width(), 8)))
	return &Sorted{t: t, order: order, inPlace: inPlace}
}

// rowsAscend reports whether rows 0 to highWater-1 have ascending keys,
// checked on every core.
func (t *Table) rowsAscend() bool {
	np := len(t.pages)
	if np == 0 {
		return true
	}
	procs := max(1, min(t.runner().Width(), np))
	ok := make([]bool, procs)
	t.runner().Run(procs, func(w int) {
		{
			lo, hi := np*w/procs, np*(w+1)/procs
			var prev uint64
			for pi := lo; pi < hi; pi++ {
				keys := t.pages[pi].keys[:t.rowsIn(pi)]
				if len(keys) == 0 || (pi > 0 && keys[0] <= t.lastKey(pi-1)) || (pi > lo && keys[0] <= prev) {
					return
				}
				for i := 1; i < len(keys); i++ {
					if keys[i] <= keys[i-1] {
						return
					}
				}
				prev = keys[len(keys)-1]
			}
			ok[w] = true
		}
	})
	return !slices.Contains(ok, false)
}

// rowsIn is the number of rows below highWater in page pi.
func (t *Table) rowsIn(pi int) int {
	return max(0, min(len(t.pages[pi].keys), t.highWater-pi<<t.pageShift))
}

// lastKey is the key of the last row below highWater in page pi, which
// has one.
func (t *Table) lastKey(pi int) uint64 { return t.pages[pi].keys[t.rowsIn(pi)-1] }

// runs calls f for the rows i to i+n-1 of a dense view, a run of rows in
// one page at a time: page p's rows o to o+k-1 are rows at to at+k-1 of
// those asked for.
func (v *Sorted) runs(i, n int, f func(p *page, o, k, at int)) {
	t := v.t
	for at := 0; at < n; {
		r := i + at
		pi, o := r>>t.pageShift, r&t.pageMask
		k := min(n-at, t.rowsIn(pi)-o)
		f(&t.pages[pi], o, k, at)
		at += k
	}
}

// Len is the number of rows.
func (v *Sorted) Len() int {
	if v.dense {
		return v.t.live
	}
	return len(v.order)
}

// InPlace reports whether the table's rows were already in key order (as
// a restored table's are, until it gains rows): reading them in key order
// then reads the table's memory in order. Otherwise each row read is a
// cache miss, and for more than one column Export, which reads each row
// once for all its columns, costs less.
func (v *Sorted) InPlace() bool { return v.inPlace }

// Keys writes the keys of rows i, i+1, ... into dst.
func (v *Sorted) Keys(dst []uint64, i int) {
	if v.dense {
		v.runs(i, len(dst), func(p *page, o, k, at int) { copy(dst[at:at+k], p.keys[o:o+k]) })
		return
	}
	for j, e := range v.order[i : i+len(dst)] {
		dst[j] = e.key
	}
}

// Floats writes elements e, e+1, ... of a column of Snapshot (0 is
// Values, 1 + s is State[s]; Dim elements a row) into dst.
func (v *Sorted) Floats(col int, dst []float32, e int) {
	t := v.t
	d, stride := t.dim, t.stride
	if v.dense && d == 1 {
		v.runs(e, len(dst), func(p *page, o, k, at int) {
			out := dst[at : at+k]
			data := p.data[o*stride+col : (o+k-1)*stride+col+1]
			for j := range out {
				out[j] = data[j*stride]
			}
		})
		return
	}
	if d == 1 {
		for j, kr := range v.order[e : e+len(dst)] {
			r := int(kr.row)
			dst[j] = t.pages[r>>t.pageShift].data[(r&t.pageMask)*stride+col]
		}
		return
	}
	for j := 0; j < len(dst); {
		i, c := (e+j)/d, (e+j)%d
		r := i
		if !v.dense {
			r = int(v.order[i].row)
		}
		at := (r&t.pageMask)*stride + col*d
		j += copy(dst[j:], t.pages[r>>t.pageShift].data[at+c:at+d])
	}
}

// row is the table's row of the i-th row in key order.
func (v *Sorted) row(i int) int {
	if v.dense {
		return i
	}
	return int(v.order[i].row)
}

// Snapshot copies the rows into a Snapshot, as Export does.
func (v *Sorted) Snapshot() Snapshot {
	if v.dense {
		return v.t.Export()
	}
	s := v.t.emptySnapshot()
	v.t.gather(&s, v.order, max(1, min(v.t.runner().Width(), 8)))
	return s
}

// HasUpdates reports whether the table keeps per-row update counts
// (Snapshot.Updates), HasLastTouch whether it keeps last-touched steps.
func (v *Sorted) HasUpdates() bool   { return v.t.keepCount }
func (v *Sorted) HasLastTouch() bool { return v.t.keepTouch }

// Updates writes the update counts of rows i, i+1, ... into dst; 0 where
// the table keeps none.
func (v *Sorted) Updates(dst []int64, i int) {
	t := v.t
	for j := range dst {
		r := v.row(i + j)
		dst[j] = 0
		if p := &t.pages[r>>t.pageShift]; p.count != nil {
			dst[j] = int64(p.count[r&t.pageMask])
		}
	}
}

// LastTouch writes the last-touched steps of rows i, i+1, ... into dst; 0
// where the table keeps none.
func (v *Sorted) LastTouch(dst []int64, i int) {
	t := v.t
	for j := range dst {
		r := v.row(i + j)
		dst[j] = 0
		if p := &t.pages[r>>t.pageShift]; p.touch != nil {
			dst[j] = t.base + int64(p.touch[r&t.pageMask])
		}
	}
}

// sortKeyRows sorts rows by key (keys are distinct) by radix sort, most
// significant bits first, with scratch for as many rows (grown if short),
// which it returns. Each pass sorts by the leading bits of the keys below
// the highest bit in which the smallest and largest differ; a run already
// in order is left as it is.
func sortKeyRows(rows, scratch []keyRow) []keyRow {
	if len(rows) <= 32 {
		for i := 1; i < len(rows); i++ {
			for j := i; j > 0 && rows[j].key < rows[j-1].key; j-- {
				rows[j], rows[j-1] = rows[j-1], rows[j]
			}
		}
		return scratch
	}
	lo, hi := rows[0].key, rows[0].key
	ascending := true
	for i := 1; i < len(rows); i++ {
		k := rows[i].key
		ascending = ascending && k > rows[i-1].key
		lo, hi = min(lo, k), max(hi, k)
	}
	if ascending {
		return scratch
	}
	top := bits.Len64(lo ^ hi) // >= 1: the keys are distinct
	digit := min(top, max(2, bits.Len(uint(len(rows)))-2), 11)
	shift := uint(top - digit)
	mask := uint64(1)<<digit - 1
	var count [1<<11 + 1]int
	for _, e := range rows {
		count[(e.key>>shift)&mask+1]++
	}
	for b := 1; b <= int(mask)+1; b++ {
		count[b] += count[b-1]
	}
	if cap(scratch) < len(rows) {
		scratch = make([]keyRow, len(rows))
	}
	tmp := scratch[:len(rows)]
	at := count // a copy: count keeps the bucket starts
	for _, e := range rows {
		b := (e.key >> shift) & mask
		tmp[at[b]] = e
		at[b]++
	}
	copy(rows, tmp)
	for b := range int(mask) + 1 {
		if count[b+1]-count[b] > 1 {
			scratch = sortKeyRows(rows[count[b]:count[b+1]], scratch)
		}
	}
	return scratch
}

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
	nBuckets    uint64
	maxLive     int
	rowMask     uint32
}

func (t *Table) saveState() tableState {
	return tableState{t.base, t.clock, t.mod, t.floor, t.index, t.nBuckets, t.maxLive, t.rowMask}
}

func (t *Table) putState(s tableState) {
	t.base, t.clock, t.mod, t.floor, t.index, t.nBuckets, t.maxLive, t.rowMask = s.base, s.clock, s.mod, s.floor, s.index, s.nBuckets, s.maxLive, s.rowMask
}

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
func (t *Table) fillPages(s Snapshot) error {
	n := len(s.Keys)
	pageRows := 1 << t.pageShift
	t.pages = make([]page, (n+pageRows-1)/pageRows)
	rg := t.bucketRanges(indexRanges(n, t.runner().Width()))
	nr := len(rg.lo) - 1
	workers := max(1, min(t.runner().Width(), len(t.pages)))
	// Entries expected per range and worker, with room: the rest spill.
	chunk := n / (nr * workers)
	chunk += chunk/16 + 64
	scat := make([]scatter, workers)
	var next atomic.Int64
	var faulted atomic.Value
	var bad atomic.Int64 // the first row whose key does not ascend; n if none
	bad.Store(int64(n))
	t.runner().Run(workers, func(w int) {
		{
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
				t.pages[pi] = t.newPage(pageRows)
				p := &t.pages[pi]
				lo := pi << t.pageShift
				hi := min(n, lo+pageRows)
				var prev uint64
				if lo > 0 {
					prev = s.Keys[lo-1]
				}
				if i := t.scatterKeys(sc, p.keys, s.Keys[lo:hi], lo, prev, rg.m); i >= 0 {
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
	t.indexParts(byRange, rg)
	return nil
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
// not above the one before and returns its row, or returns -1.
func (t *Table) scatterKeys(sc *scatter, to, keys []uint64, lo int, prev, rangeMul uint64) int {
	to = to[:len(keys)]
	nb, mask := t.nBuckets, t.rowMask
	dst, at, chunk := sc.dst, sc.n, sc.chunk
	for o, k := range keys {
		if k <= prev && lo+o > 0 {
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

// indexEntry is what the bulk index build sorts for row r, of hash h: its
// home bucket in the high 32 bits, its index slot (tag and row) in the low.
func (t *Table) indexEntry(h uint64, r int) uint64 {
	return t.home(h)<<32 | uint64(uint32(h)&^t.rowMask|uint32(r+1))
}

// indexRows enters rows (indexEntry) into an empty index, as indexParts.
func (t *Table) indexRows(rows []uint64) {
	rg := t.bucketRanges(indexRanges(len(rows), t.runner().Width()))
	byRange := make([][][]uint64, len(rg.lo)-1)
	if len(byRange) == 1 {
		byRange[0] = [][]uint64{rows}
	} else {
		for c := range byRange {
			byRange[c] = make([][]uint64, 1)
		}
		for _, e := range rows {
			c := rg.of(e >> 32)
			byRange[c][0] = append(byRange[c][0], e)
		}
	}
	t.indexParts(byRange, rg)
}

// bucketRanges divides the index's buckets into nr ranges (some may be
// empty) by a multiply and a shift, cheaper per row than a division.
type bucketRanges struct {
	m  uint64   // bucket b is in range (b*m)>>32
	lo []uint64 // range c is buckets [lo[c], lo[c+1])
}

func (t *Table) bucketRanges(nr int) bucketRanges {
	nb := t.nBuckets
	rg := bucketRanges{m: max(1, uint64(nr)<<32/nb), lo: make([]uint64, nr+1)}
	for c := range nr + 1 {
		// The first b with b*m >= c<<32.
		rg.lo[c] = min(nb, (uint64(c)<<32+rg.m-1)/rg.m)
	}
	rg.lo[nr] = nb
	return rg
}

func (rg bucketRanges) of(b uint64) int { return int((b * rg.m) >> 32) }

// parallelIndex is the number of rows from which the index is built on
// every core.
var parallelIndex = 1 << 16

// indexRanges is the number of ranges of buckets an index of n rows is
// built in: for a large one, ranges of about rangeRows rows, so that a
// range's counting sort stays in the cache, and at least one per core.
func indexRanges(n, width int) int {
	if n < parallelIndex {
		return 1
	}
	return max(width, n/rangeRows)
}

// rangeRows is the number of rows a range of the index is built for
// (1 MiB of entries to sort).
const rangeRows = 1 << 16

// indexParts enters rows into an empty index, byRange[c] holding (in any
// number of lists) the entries (indexEntry) of the rows whose home bucket
// is in range c of rg. The ranges of buckets are filled on every core, each
// in the cache; the entries that would run past the end of a range (or
// past the last bucket) are entered after, through find, which puts them
// where inserting them last would.
func (t *Table) indexParts(byRange [][][]uint64, rg bucketRanges) {
	nr := uint64(len(byRange))
	over := make([][]uint64, nr)
	var next atomic.Uint64
	t.runner().Run(int(min(uint64(t.runner().Width()), nr)), func(int) {
		{
			var fill []uint8
			for {
				c := next.Add(1) - 1
				if c >= nr {
					return
				}
				lo, hi := rg.lo[c], rg.lo[c+1]
				if uint64(cap(fill)) < hi-lo {
					fill = make([]uint8, hi-lo)
				}
				over[c] = t.indexRange(byRange[c], lo, hi, fill[:hi-lo])
			}
		}
	})
	for _, o := range over {
		for _, e := range o {
			slot := uint32(e)
			r := int(slot&t.rowMask) - 1
			k := t.keyAt(r)
			_, pos := t.find(k, hashKey(k))
			t.index[pos] = slot
		}
	}
}

// indexRange enters rows (indexEntry), whose home buckets are in [lo, hi),
// into those buckets, each in the first bucket from its home with a free
// slot, and returns the ones that found none before hi. fill, of hi-lo
// elements, is scratch. Entering in any order keeps the invariant (every
// bucket from an entry's home up to its own is full), as no entry leaves.
func (t *Table) indexRange(rows [][]uint64, lo, hi uint64, fill []uint8) (over []uint64) {
	clear(fill)
	nb := hi - lo
	index := t.index[lo*bucketSlots : hi*bucketSlots]
	for _, l := range rows {
		for _, e := range l {
			b := e>>32 - lo
			for b < nb && fill[b] == bucketSlots {
				b++
			}
			if b >= nb {
				over = append(over, e)
				continue
			}
			index[b*bucketSlots+uint64(fill[b])] = uint32(e)
			fill[b]++
		}
	}
	return over
}
