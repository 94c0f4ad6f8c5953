package shard

import (
	"fmt"

	"github.com/paramserv/paramserv/internal/ckptformat"
	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// A restore into a disk tier (TierStreamLoader) reads a table's rows from
// the checkpoint's files a run at a time: the files of every shard when
// re-sharding, the files of a delta chain unapplied, or the ps's own file.
// The columns are read in place (the files are mapped where they can be);
// what the stream allocates is one run of rows.

// fileRows is a RowStream over the columns of one or more shard files.
type fileRows struct {
	dim, slots int
	step       int64 // the checkpoint's: last touches are kept within 0 and it
	srcs       []rowCols
	parts      []rowPart
	n          int
	hasUpdates bool
	hasTouch   bool
}

// rowCols are one file's columns of a table (views of the file).
type rowCols struct {
	keys    []uint64
	values  []float32
	state   [][]float32
	updates []int64 // nil: none (rows get 0)
	touch   []int64 // nil: none
}

// rowPart is a run of the stream: the rows of source src that keep
// accepts, in file order, or (list set) the rows listed.
type rowPart struct {
	src  int
	keep func(key uint64) bool // nil: every row
	list []int32
}

// each calls f with the source and row of every row of the stream, in
// order.
func (r *fileRows) each(f func(c *rowCols, i int) error) error {
	for _, p := range r.parts {
		c := &r.srcs[p.src]
		if p.list != nil {
			for _, i := range p.list {
				if err := f(c, int(i)); err != nil {
					return err
				}
			}
			continue
		}
		for i, k := range c.keys {
			if p.keep == nil || p.keep(k) {
				if err := f(c, i); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (r *fileRows) Len() int { return r.n }

func (r *fileRows) Touches(f func(touch []int64)) bool {
	if !r.hasTouch {
		return false
	}
	buf := make([]int64, 0, 1<<12)
	_ = r.each(func(c *rowCols, i int) error {
		var tc int64
		if c.touch != nil {
			tc = min(max(c.touch[i], 0), r.step)
		}
		if buf = append(buf, tc); len(buf) == cap(buf) {
			f(buf)
			buf = buf[:0]
		}
		return nil
	})
	if len(buf) > 0 {
		f(buf)
	}
	return true
}

func (r *fileRows) Rows(n int, f func(chunk sparse.Snapshot) error) error {
	n = max(n, 1)
	d := r.dim
	s := sparse.NewSnapshot(d, r.slots, n, r.hasUpdates, r.hasTouch)
	flush := func() error {
		if len(s.Keys) == 0 {
			return nil
		}
		err := f(s)
		s.Keys, s.Values = s.Keys[:0], s.Values[:0]
		for j := range s.State {
			s.State[j] = s.State[j][:0]
		}
		if s.Updates != nil {
			s.Updates = s.Updates[:0]
		}
		if s.LastTouch != nil {
			s.LastTouch = s.LastTouch[:0]
		}
		return err
	}
	err := r.each(func(c *rowCols, i int) error {
		s.Keys = append(s.Keys, c.keys[i])
		s.Values = append(s.Values, c.values[i*d:(i+1)*d]...)
		for j := range s.State {
			s.State[j] = append(s.State[j], c.state[j][i*d:(i+1)*d]...)
		}
		if s.Updates != nil {
			var u int64
			if c.updates != nil {
				u = c.updates[i]
			}
			s.Updates = append(s.Updates, uint32(u))
		}
		if s.LastTouch != nil {
			var tc int64
			if c.touch != nil {
				tc = min(max(c.touch[i], 0), r.step)
			}
			s.LastTouch = append(s.LastTouch, tc)
		}
		if len(s.Keys) == n {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// colsOf reads the columns of table tb from one shard file.
func colsOf(sh *ckptformat.Shard, tb ckptformat.TableInfo, slots []string, dim int) (rowCols, error) {
	keys, err := uint64sView(sh, ckptformat.KeysName(tb.Name))
	if err != nil {
		return rowCols{}, err
	}
	c := rowCols{keys: keys}
	if c.values, err = float32sView(sh, ckptformat.ValuesName(tb.Name)); err != nil {
		return rowCols{}, err
	}
	if len(c.values) != len(keys)*dim {
		return rowCols{}, fmt.Errorf("%d keys of dim %d need %d values, got %d", len(keys), dim, len(keys)*dim, len(c.values))
	}
	for _, slot := range slots {
		st, err := float32sView(sh, ckptformat.SlotName(tb.Name, slot))
		if err != nil {
			return rowCols{}, err
		}
		if len(st) != len(c.values) {
			return rowCols{}, fmt.Errorf("slot %s has %d values, want %d", slot, len(st), len(c.values))
		}
		c.state = append(c.state, st)
	}
	if t, err := sh.Lookup(ckptformat.SlotName(tb.Name, "updates")); err == nil {
		if u, err := t.Int64sView(); err == nil && len(u) == len(keys) {
			c.updates = u
		}
	}
	if t, err := sh.Lookup(ckptformat.SlotName(tb.Name, "last_touch")); err == nil {
		if lt, err := t.Int64sView(); err == nil && len(lt) == len(keys) {
			c.touch = lt
		}
	}
	return c, nil
}

// tableStream is the stream of table tb's rows that ps task of numPS
// holds: from the files of shards from (each a full file, or a base and
// its deltas), keeping, when re-sharding, the keys ps task owns.
func (c *shardFiles) tableStream(from []int, tb ckptformat.TableInfo, slots []string, dim int, reshard bool, task, numPS int) (*fileRows, error) {
	r := &fileRows{dim: dim, slots: len(slots), step: c.m.Step}
	mine := func(uint64) bool { return true }
	if reshard {
		mine = func(k uint64) bool { return placement.KeyShard(k, numPS) == task }
	}
	for _, k := range from {
		sh, err := c.shard(k)
		if err != nil {
			return nil, err
		}
		links := []*ckptformat.Shard{sh}
		changed := func(uint64) bool { return false }
		var rows []ckptformat.RowRef
		if ch := c.chains[k]; ch != nil {
			links = ch.Links
			if changed, rows, err = ch.Rows(tb.Name); err != nil {
				return nil, fmt.Errorf("shard %d: %w", k, err)
			}
		}
		first := len(r.srcs)
		for j, l := range links {
			if _, err := l.Lookup(ckptformat.KeysName(tb.Name)); err != nil && j > 0 {
				r.srcs = append(r.srcs, rowCols{}) // a delta without the table: none of its rows is read
				continue
			}
			cols, err := colsOf(l, tb, slots, dim)
			if err != nil {
				return nil, fmt.Errorf("shard %d: %w", k, err)
			}
			r.hasUpdates = r.hasUpdates || cols.updates != nil
			r.hasTouch = r.hasTouch || cols.touch != nil
			r.srcs = append(r.srcs, cols)
		}
		keep := func(key uint64) bool { return mine(key) && !changed(key) }
		r.parts = append(r.parts, rowPart{src: first, keep: keep})
		for _, key := range r.srcs[first].keys {
			if keep(key) {
				r.n++
			}
		}
		// The deltas' rows, a file at a time (each file's in key order).
		bySrc := map[int32][]int32{}
		for _, ref := range rows {
			if mine(r.srcs[first+int(ref.Src)].keys[ref.I]) {
				bySrc[ref.Src] = append(bySrc[ref.Src], ref.I)
			}
		}
		for j := range int32(len(links)) {
			if list := bySrc[j]; len(list) > 0 {
				r.parts = append(r.parts, rowPart{src: first + int(j), list: list})
				r.n += len(list)
			}
		}
	}
	return r, nil
}
