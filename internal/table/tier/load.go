package tier

import (
	"fmt"
	"slices"

	"github.com/paramserv/paramserv/internal/parallel"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// Restoring straight into the store. A restored table larger than its
// share of the budget is not built in memory first: Load imports the rows
// touched most recently into the table, up to the share, and writes the
// others to the store in batches, under a key prefix of their own, as the
// state is built (with no lock held). Attach then gives the table that
// disk tier instead of an empty one. The ps's memory during a restore is
// the budget, a batch and (with pebble) its memtables, beside the checkpoint's
// files (mapped where they can be).

// loadBatchBytes is the size of a batch of rows Load writes at a time to
// pebble (the hash store takes them all in one pass: hashFile.load).
const loadBatchBytes = 1 << 20

// Load imports rows (in ascending key order, or it fails with
// sparse.ErrUnordered) into t, a table of a state being restored that has
// no rows yet: those that fit in 1/tables of the budget go into t, the
// most recently touched first; the others into the store, for the disk
// tier Attach gives t. It is safe to call with no lock held, concurrently
// with the background loop. A state that is not installed after all must
// be let go with Unload.
func (m *Manager) Load(t *sparse.Table, rows sparse.Snapshot, tables int) error {
	if i := sparse.Unordered(rows.Keys, parallel.Serial); i >= 0 {
		return fmt.Errorf("%w: key %d at %d after %d", sparse.ErrUnordered, rows.Keys[i], i, rows.Keys[i-1])
	}
	tt := NewTable(t, m.store)
	keep := int(m.cfg.Budget / int64(max(tables, 1)) / tt.RowBytes())
	n := len(rows.Keys)
	if n <= keep {
		if err := t.Import(rows); err != nil {
			return err
		}
	} else {
		hot := hotRows(rows, keep)
		if err := t.Import(pick(rows, hot, true)); err != nil {
			return err
		}
		if err := tt.write(rows, hot, t.Clock()); err != nil {
			m.drop(tt)
			return err
		}
	}
	m.stageMu.Lock()
	if m.staged == nil {
		m.staged = make(map[*sparse.Table]*Table)
	}
	m.staged[t] = tt
	m.stageMu.Unlock()
	return nil
}

// Unload lets go of what Load wrote for t, whose state is not installed.
func (m *Manager) Unload(t *sparse.Table) {
	m.stageMu.Lock()
	tt := m.staged[t]
	delete(m.staged, t)
	m.stageMu.Unlock()
	if tt != nil {
		m.drop(tt)
	}
}

// adopt returns the disk tier Load made for t, if any, and forgets it.
func (m *Manager) adopt(t *sparse.Table) *Table {
	m.stageMu.Lock()
	defer m.stageMu.Unlock()
	tt := m.staged[t]
	delete(m.staged, t)
	return tt
}

// drop deletes a table's rows from the store.
func (m *Manager) drop(tt *Table) {
	if err := tt.Drop(); err != nil {
		m.cfg.Logf("disk tier: deleting the rows of a restore that was not installed: %v", err)
	}
}

// hotRows marks the up to keep rows of s last touched most recently (the
// first keep rows, without last-touched steps).
func hotRows(s sparse.Snapshot, keep int) []bool {
	hot := make([]bool, len(s.Keys))
	if keep <= 0 {
		return hot
	}
	if s.LastTouch == nil {
		for i := range keep {
			hot[i] = true
		}
		return hot
	}
	// The threshold: the touch at rank keep from the top in a sample, then
	// the rows above it, then those at it until keep are taken.
	const samples = 1 << 12
	every := max(1, len(s.Keys)/samples)
	var sample []int64
	for i := 0; i < len(s.Keys); i += every {
		sample = append(sample, s.LastTouch[i])
	}
	slices.Sort(sample)
	thr := sample[max(0, len(sample)-1-int(int64(keep)*int64(len(sample))/int64(len(s.Keys))))]
	n := 0
	for i, tc := range s.LastTouch {
		if n < keep && tc > thr {
			hot[i] = true
			n++
		}
	}
	for i, tc := range s.LastTouch {
		if n < keep && tc == thr {
			hot[i] = true
			n++
		}
	}
	return hot
}

// pick copies the rows of s whose mark in hot is want.
func pick(s sparse.Snapshot, hot []bool, want bool) sparse.Snapshot {
	d := s.Dim
	out := sparse.Snapshot{Dim: d, State: make([][]float32, len(s.State))}
	if s.Updates != nil {
		out.Updates = []uint32{}
	}
	if s.LastTouch != nil {
		out.LastTouch = []int64{}
	}
	for i, k := range s.Keys {
		if hot[i] != want {
			continue
		}
		out.Keys = append(out.Keys, k)
		out.Values = append(out.Values, s.Values[i*d:(i+1)*d]...)
		for j := range s.State {
			out.State[j] = append(out.State[j], s.State[j][i*d:(i+1)*d]...)
		}
		if s.Updates != nil {
			out.Updates = append(out.Updates, s.Updates[i])
		}
		if s.LastTouch != nil {
			out.LastTouch = append(out.LastTouch, s.LastTouch[i])
		}
	}
	return out
}

// write writes the rows of s not marked in hot to the store, in batches;
// a row without a last-touched step gets clock, as Import gives it.
func (t *Table) write(s sparse.Snapshot, hot []bool, clock int64) error {
	cold := len(hot)
	for _, h := range hot {
		if h {
			cold--
		}
	}
	t.filter = newMissFilter(cold * 3 / 2)
	one := sparse.Snapshot{Dim: s.Dim, State: make([][]float32, len(s.State)), LastTouch: []int64{clock}}
	if s.Updates != nil {
		one.Updates = []uint32{0}
	}
	if t.err != nil {
		return t.err
	}
	size := t.rowLen()
	d := s.Dim
	encode := func(i int, dst []byte) []byte {
		// One row at a time through encode, as Demote writes it.
		one.Values = s.Values[i*d : (i+1)*d]
		for j := range s.State {
			one.State[j] = s.State[j][i*d : (i+1)*d]
		}
		if s.Updates != nil {
			one.Updates[0] = s.Updates[i]
		}
		if s.LastTouch != nil {
			one.LastTouch[0] = s.LastTouch[i]
		}
		return t.encode(dst, &one, 0)
	}
	if h, ok := t.rows.(*hashFile); ok {
		// The hash store takes the rows in one pass, page by page.
		var rows []int32
		for i, k := range s.Keys {
			if !hot[i] {
				rows = append(rows, int32(i))
				t.filter.add(k)
			}
		}
		t.onDisk += int64(len(rows))
		err := h.load(len(rows), func(j int) uint64 { return s.Keys[rows[j]] }, func(j int, dst []byte) { encode(int(rows[j]), dst) })
		if err != nil {
			return fmt.Errorf("%w: writing to %s: %w", ErrStore, t.store.dir, err)
		}
		return t.store.Err()
	}
	batch := max(1, loadBatchBytes/size)
	buf := make([]byte, batch*size)
	ch := make([]change, 0, batch)
	put := func() error {
		if err := t.rows.write(ch); err != nil {
			return fmt.Errorf("%w: writing to %s: %w", ErrStore, t.store.dir, err)
		}
		ch = ch[:0]
		return t.store.Err()
	}
	for i, k := range s.Keys {
		if hot[i] {
			continue
		}
		n := len(ch)
		ch = append(ch, change{key: k, row: encode(i, buf[n*size:(n+1)*size:(n+1)*size])})
		t.filter.add(k)
		t.onDisk++
		if len(ch) == batch {
			if err := put(); err != nil {
				return err
			}
		}
	}
	return put()
}
