package sparse

import (
	"fmt"
	"math"

	"github.com/paramserv/paramserv/internal/format"
	"github.com/paramserv/paramserv/internal/optim"
)

// trial is the scratch of CheckPush: a copy of each distinct row a push
// updates (value and state slots), its update count, and where each key's
// copy is.
type trial struct {
	rows  []float32
	count []int64
	at    map[uint64]int
	views [][]float32
	// CheckPushSet's: the keys without a row and their gradients, and
	// which key each row of a batch is.
	keys  []uint64
	grads []float32
	idx   []int32
}

// CheckPush reports whether Push(keys, grads, step) would leave every
// value and state of the rows it updates finite, and changes nothing: it
// runs the rule on copies of the rows (a key not in the table on the row it
// would get), in the order Push updates them, so a key given twice is
// updated twice. The error names the first key whose row would not be
// finite, and wraps ErrNotFinite (ErrShape for a grads of the wrong
// length). A gradient of finite values can still overflow a row: a push
// refused here must not be applied, and then the table is as it was.
//
// Keys the table would not admit (MinCount, MaxRows) are tried as new rows
// too: such a push is refused although Push would skip them.
func (t *Table) CheckPush(keys []uint64, grads []float32) error {
	d, stride := t.dim, t.stride
	if len(grads) != len(keys)*d {
		return fmt.Errorf("%w: Push of %d keys with Dim %d needs %d floats, got %d", ErrShape, len(keys), d, len(keys)*d, len(grads))
	}
	tr := &t.trial
	if tr.at == nil {
		tr.at = make(map[uint64]int)
	}
	if cap(tr.views) < t.slots {
		tr.views = make([][]float32, t.slots)
	}
	views := tr.views[:t.slots]
	defer func() {
		clear(tr.at)
		clear(views)
		tr.rows, tr.count = tr.rows[:0], tr.count[:0]
	}()
	for i, k := range keys {
		j, ok := tr.at[k]
		if !ok {
			j = len(tr.count)
			tr.at[k] = j
			tr.rows = append(tr.rows, make([]float32, stride)...)
			row := tr.rows[j*stride : (j+1)*stride : (j+1)*stride]
			var n int64
			if r, _ := t.find(k, hashKey(k)); r >= 0 {
				p := &t.pages[r>>t.pageShift]
				o := r & t.pageMask
				copy(row, p.data[o*stride:(o+1)*stride])
				if p.count != nil {
					n = int64(p.count[o])
				}
			} else {
				t.init.Init(k, row[:d:d])
				if t.slots > 0 {
					for s := range views {
						views[s] = row[(s+1)*d : (s+2)*d : (s+2)*d]
					}
					t.rule.InitState(views)
				}
			}
			tr.count = append(tr.count, n)
		}
		row := tr.rows[j*stride : (j+1)*stride : (j+1)*stride]
		for s := range views {
			views[s] = row[(s+1)*d : (s+2)*d : (s+2)*d]
		}
		n := int64(1)
		if t.keepCount {
			n = min(tr.count[j]+1, math.MaxUint32)
			tr.count[j] = n
		}
		t.rule.Update(row[:d:d], grads[i*d:(i+1)*d:(i+1)*d], views, n)
		for _, x := range row {
			if math.Float32bits(x)&0x7f800000 == 0x7f800000 {
				return fmt.Errorf("%w: key %d: the update by its gradient would make its row %v", ErrNotFinite, k, x)
			}
		}
	}
	return nil
}

// CheckPushSet is CheckPush(ks.Keys(), grads), through the rows ks
// remembers, as PushSet finds them: the rows of a key set used again are
// tried without the index, in batches (copies of the rows, one rule call a
// batch) where PushSet batches them, and keys without a row as CheckPush
// tries them. It changes no row. The error names the first key found
// whose row would not be finite (the rows found before the keys without
// one).
func (t *Table) CheckPushSet(ks *KeySet, grads []float32) error {
	d := t.dim
	if len(grads) != len(ks.keys)*d {
		return fmt.Errorf("%w: Push of %d keys with Dim %d needs %d floats, got %d", ErrShape, len(ks.keys), d, len(ks.keys)*d, len(grads))
	}
	ks.setRows(t)
	if !ks.distinct || t.keepCount || !optim.PerCoordinate(t.rule) {
		return t.CheckPush(ks.keys, grads)
	}
	// A key without a row has none wherever it stands in ks (resolve gives
	// every use of a key its row), so the two groups share no key.
	tr := &t.trial
	tr.keys, tr.grads = tr.keys[:0], tr.grads[:0]
	for i, r := range ks.rows {
		if r < 0 {
			tr.keys = append(tr.keys, ks.keys[i])
			tr.grads = append(tr.grads, grads[i*d:(i+1)*d]...)
		}
	}
	if err := t.checkRows(ks.rows, ks.keys, grads); err != nil {
		return err
	}
	if len(tr.keys) == 0 {
		return nil
	}
	return t.CheckPush(tr.keys, tr.grads)
}

// checkRows runs the rule on copies of the distinct rows (-1 skipped),
// gathered batchRows values at a time as pushBatched gathers them, and
// names the first key whose value or state would not be finite.
func (t *Table) checkRows(rows []int32, keys []uint64, grads []float32) error {
	d, slots, stride := t.dim, t.slots, t.stride
	per := max(1, batchRows/d) // rows per batch
	if len(t.scratch) < per*d*(2+slots) {
		t.scratch = make([]float32, per*d*(2+slots))
	}
	val := t.scratch[:per*d]
	gb := t.scratch[per*d : 2*per*d]
	state := t.scratch[2*per*d:]
	tr := &t.trial
	if cap(tr.idx) < per {
		tr.idx = make([]int32, per)
	}
	idx := tr.idx[:per]
	for lo := 0; lo < len(rows); lo += per {
		hi := min(lo+per, len(rows))
		n := 0
		for i := lo; i < hi; i++ {
			r := int(rows[i])
			if r < 0 {
				continue
			}
			row := t.pages[r>>t.pageShift].data[(r&t.pageMask)*stride:][:stride:stride]
			copy(val[n*d:(n+1)*d], row[:d])
			for s := range slots {
				copy(state[(s*per+n)*d:(s*per+n+1)*d], row[(s+1)*d:(s+2)*d])
			}
			copy(gb[n*d:(n+1)*d], grads[i*d:(i+1)*d])
			idx[n] = int32(i)
			n++
		}
		if n == 0 {
			continue
		}
		for s := range slots {
			t.views[s] = state[s*per*d : (s*per+n)*d]
		}
		t.rule.Update(val[:n*d], gb[:n*d], t.views, 1)
		bad := format.FirstNonFinite(val[:n*d])
		for s := range slots {
			if j := format.FirstNonFinite(state[s*per*d : (s*per+n)*d]); j >= 0 && (bad < 0 || j < bad) {
				bad = j
			}
		}
		if bad >= 0 {
			// The row's first value or state not finite, for the message.
			i := int(idx[bad/d])
			x := val[bad]
			if !notFinite(x) {
				for s := range slots {
					if y := state[s*per*d+bad]; notFinite(y) {
						x = y
						break
					}
				}
			}
			return fmt.Errorf("%w: key %d: the update by its gradient would make its row %v", ErrNotFinite, keys[i], x)
		}
	}
	return nil
}

func notFinite(x float32) bool { return math.Float32bits(x)&0x7f800000 == 0x7f800000 }
