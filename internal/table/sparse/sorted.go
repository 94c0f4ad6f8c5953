package sparse

// The sorted view: the live rows sorted by key on several cores (a radix
// pass, then each bucket in the cache), read a range at a time (Sorted) by
// a checkpoint that streams them to its file.

import (
	"math"
	"math/bits"
	"slices"
	"sync/atomic"
)

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
	// run puts its rows into their buckets, in row order. At most 256
	// buckets: pass 3 writes each row to its bucket's next place, and with
	// 4096 buckets over tens of MB each write was a TLB miss (a 3.13M-key
	// table's save took 0.9 s of CPU against 0.6 s with 256); a bucket
	// (12k rows of such a table, 200 KB) is then sorted in the cache.
	top := bits.Len64(lo ^ hi)
	digit := min(top, max(1, bits.Len(uint(n/2048))), 8)
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

// Sorted is a table's rows in ascending key order (Table.Sorted), or in
// the order the table holds them (Table.InTableOrder), read a range at a
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
	// rows): no order is kept, and rows are read in runs. In a view in
	// the table's order (anyOrder): no row was ever freed.
	dense bool
	// anyOrder: the view is InTableOrder's, in the table's order.
	anyOrder bool
}

// InTableOrder is the view of the table's rows in the order its memory
// holds them (the order rows were made in, less the rows freed since),
// for a checkpoint that streams them to its file as they lie, with no
// sort and no row read out of place: its keys are distinct, in no
// particular order. A table whose rows were never freed costs nothing to
// view; else the live rows' places are listed first (16 bytes a row),
// in one pass over the pages.
func (t *Table) InTableOrder() *Sorted {
	if t.live == t.highWater {
		return &Sorted{t: t, inPlace: true, dense: true, anyOrder: true}
	}
	order := make([]keyRow, 0, t.live)
	t.forLive(func(r int, p *page, o int) { order = append(order, keyRow{p.keys[o], uint32(r)}) })
	return &Sorted{t: t, order: order, inPlace: true, anyOrder: true}
}

// AnyOrder reports whether the view is in the table's order
// (InTableOrder) rather than in key order.
func (v *Sorted) AnyOrder() bool { return v.anyOrder }

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
// a restored table's are, until it gains rows), or the view is in the
// table's order (InTableOrder): reading them in the view's order then
// reads the table's memory in order. Otherwise each row read is a
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

// Snapshot copies the rows into a Snapshot, as Export does, in the view's
// order.
func (v *Sorted) Snapshot() Snapshot {
	if v.dense && v.anyOrder {
		order := make([]keyRow, 0, v.t.live)
		v.t.forLive(func(r int, p *page, o int) { order = append(order, keyRow{p.keys[o], uint32(r)}) })
		s := v.t.emptySnapshot()
		v.t.gather(&s, order, max(1, min(v.t.runner().Width(), 8)))
		return s
	}
	if v.dense {
		return v.t.Export()
	}
	s := v.t.emptySnapshot()
	v.t.gather(&s, v.order, max(1, min(v.t.runner().Width(), 8)))
	return s
}

// HasUpdates reports whether the table keeps per-row update counts
// (Snapshot.Updates), HasLastTouch whether it keeps last-touched steps.
func (v *Sorted) HasUpdates() bool { return v.t.keepCount }

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
