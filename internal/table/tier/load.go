package tier

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/paramserv/paramserv/internal/parallel"
	"github.com/paramserv/paramserv/internal/shard"
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
	m.stage(t, tt)
	return nil
}

// LoadStream is Load of rows read a run at a time (shard.RowStream: a
// re-sharding restore's rows, or a delta chain's, as they lie in the
// checkpoint's files), in any key order: the table is never gathered in
// memory. Two readings of the rows' last-touched steps choose the rows
// that stay in memory, as Load chooses them; one reading of the rows
// then puts each run's into t (sorted by key) and writes the others to
// the store. Its memory beyond the budget's rows is a run's rows (about
// loadBatchBytes) and the store's batch.
func (m *Manager) LoadStream(t *sparse.Table, rows shard.RowStream, tables int) error {
	tt := NewTable(t, m.store)
	keep := int(m.cfg.Budget / int64(max(tables, 1)) / tt.RowBytes())
	n := rows.Len()
	pick := hotPicker(rows, keep)
	tt.filter = newMissFilter(max(0, n-keep) * 3 / 2)
	run := max(256, int(loadBatchBytes/tt.RowBytes()))
	hot := make([]bool, run)
	// The hash store takes the rows on disk a bucket of its pages at a
	// time, gathered in a file on the way (loadspill.go).
	var sp *loadSpill
	if h, ok := tt.rows.(*hashFile); ok && n > keep {
		h.reserve(n - max(keep, 0))
		var err error
		if sp, err = newLoadSpill(tt, h, n-max(keep, 0)); err != nil {
			m.drop(tt)
			return err
		}
		defer sp.close()
	}
	clock := t.Clock() // unchanged by rows without last-touched steps
	maxHot, first := int64(math.MinInt64), true
	err := rows.Rows(run, func(s sparse.Snapshot) error {
		hot = hot[:len(s.Keys)]
		nh := 0
		for i := range s.Keys {
			var tc int64
			if s.LastTouch != nil {
				tc = s.LastTouch[i]
			}
			if hot[i] = pick(tc); hot[i] {
				nh++
				maxHot = max(maxHot, tc)
			}
		}
		if nh > 0 {
			h := pickSorted(s, hot, nh)
			var err error
			if first {
				err = t.Import(h) // the table's base, as a restore sets it
			} else {
				err = t.Put(h, nil) // keeps each step exactly, older ones too
			}
			if err != nil {
				return err
			}
			first = false
		}
		if nh == len(s.Keys) {
			return nil
		}
		if sp != nil {
			return sp.add(s, hot, clock)
		}
		return tt.writeCold(s, hot, clock)
	})
	if err == nil && sp != nil {
		err = sp.load()
	}
	if err == nil {
		err = m.store.Err()
	}
	if err != nil {
		m.drop(tt)
		return err
	}
	if !first && maxHot > t.Clock() && t.KeepsTouch() {
		// Import of the rows in memory at once sets the clock to their
		// newest step; Put does not.
		if err := t.Push(nil, nil, maxHot); err != nil {
			m.drop(tt)
			return err
		}
	}
	m.stage(t, tt)
	return nil
}

// hotPicker returns the choice, row by row in rows' order, of the up to
// keep rows last touched most recently (the first keep rows, without
// last-touched steps): the set hotRows marks, from two readings of the
// steps instead of one slice of them.
func hotPicker(rows shard.RowStream, keep int) func(touch int64) bool {
	n := rows.Len()
	if keep <= 0 {
		return func(int64) bool { return false }
	}
	if n <= keep {
		return func(int64) bool { return true }
	}
	const samples = 1 << 12
	every := max(1, n/samples)
	var sample []int64
	i := 0
	if !rows.Touches(func(touch []int64) {
		for _, tc := range touch {
			if i%every == 0 {
				sample = append(sample, tc)
			}
			i++
		}
	}) {
		taken := 0
		return func(int64) bool {
			taken++
			return taken <= keep
		}
	}
	slices.Sort(sample)
	thr := sample[max(0, len(sample)-1-int(int64(keep)*int64(len(sample))/int64(n)))]
	above := 0
	rows.Touches(func(touch []int64) {
		for _, tc := range touch {
			if tc > thr {
				above++
			}
		}
	})
	ties := keep - min(above, keep)
	takenAbove, takenTies := 0, 0
	return func(tc int64) bool {
		switch {
		case tc > thr && takenAbove < keep:
			takenAbove++
			return true
		case tc == thr && takenTies < ties:
			takenTies++
			return true
		}
		return false
	}
}

// pickSorted copies the n rows of s marked in hot, in ascending key order.
func pickSorted(s sparse.Snapshot, hot []bool, n int) sparse.Snapshot {
	idx := make([]int32, 0, n)
	for i, h := range hot {
		if h {
			idx = append(idx, int32(i))
		}
	}
	slices.SortFunc(idx, func(a, b int32) int { return cmp.Compare(s.Keys[a], s.Keys[b]) })
	d := s.Dim
	out := sparse.Snapshot{Dim: d, Keys: make([]uint64, n), Values: make([]float32, 0, n*d), State: make([][]float32, len(s.State))}
	for j := range out.State {
		out.State[j] = make([]float32, 0, n*d)
	}
	if s.Updates != nil {
		out.Updates = make([]uint32, n)
	}
	if s.LastTouch != nil {
		out.LastTouch = make([]int64, n)
	}
	for o, i := range idx {
		out.Keys[o] = s.Keys[i]
		out.Values = append(out.Values, s.Values[int(i)*d:int(i+1)*d]...)
		for j, st := range s.State {
			out.State[j] = append(out.State[j], st[int(i)*d:int(i+1)*d]...)
		}
		if s.Updates != nil {
			out.Updates[o] = s.Updates[i]
		}
		if s.LastTouch != nil {
			out.LastTouch[o] = s.LastTouch[i]
		}
	}
	return out
}

// Unload lets go of what Load wrote for t, whose state is not installed.
func (m *Manager) Unload(t *sparse.Table) {
	if tt := m.adopt(t); tt != nil {
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
	return t.writeCold(s, hot, clock)
}

// encoder returns the encoding of row i of s into dst as the store keeps
// it (encode, one row at a time, as Demote writes it); a row without a
// last-touched step gets clock.
func (t *Table) encoder(s sparse.Snapshot, clock int64) func(i int, dst []byte) []byte {
	one := sparse.Snapshot{Dim: s.Dim, State: make([][]float32, len(s.State)), LastTouch: []int64{clock}}
	if s.Updates != nil {
		one.Updates = []uint32{0}
	}
	d := s.Dim
	return func(i int, dst []byte) []byte {
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
}

// writeCold is write into a miss filter made for the rows to come.
func (t *Table) writeCold(s sparse.Snapshot, hot []bool, clock int64) error {
	if t.err != nil {
		return t.err
	}
	size := t.rowLen()
	encode := t.encoder(s, clock)
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

// stage keeps tt, the disk tier Load made for t, until adopt or Unload
// takes it.
func (m *Manager) stage(t *sparse.Table, tt *Table) {
	m.stageMu.Lock()
	defer m.stageMu.Unlock()
	if m.staged == nil {
		m.staged = make(map[*sparse.Table]*Table)
	}
	m.staged[t] = tt
}
