package sparse

// Export: every row copied, in key order, into a Snapshot (for a full
// checkpoint or a copy of the table), and All, the rows one at a time.

import (
	"cmp"
	"iter"
	"slices"
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
	return NewSnapshot(t.dim, t.slots, t.live, t.keepCount, t.keepTouch)
}

// NewSnapshot is a Snapshot of rows of dim values and slots state slices
// with no rows and room for n; with updates and touch it keeps the rows'
// update counts and last touches too.
func NewSnapshot(dim, slots, n int, updates, touch bool) Snapshot {
	s := Snapshot{Dim: dim, Keys: make([]uint64, 0, n), Values: make([]float32, 0, n*dim), State: make([][]float32, slots)}
	for i := range s.State {
		s.State[i] = make([]float32, 0, n*dim)
	}
	if updates {
		s.Updates = make([]uint32, 0, n)
	}
	if touch {
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
	})
}
