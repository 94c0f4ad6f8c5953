package sparse

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/paramserv/paramserv/internal/format"
	"github.com/paramserv/paramserv/internal/optim"
)

// trial is the scratch of CheckPush: a copy of each distinct row a push
// updates (value and state slots), its update count, and where each key's
// copy is.
type trial struct {
	rows  []float32
	count []int64
	views [][]float32
	// The distinct keys of a CheckPush, in order of first use, with their
	// rows (-1: none), and an open-addressing table of their positions
	// plus one (0: empty), of a power of two slots, found by key hash.
	dkeys []uint64
	drows []int32
	at    []int32
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
//
// Distinct keys under a rule that is per coordinate and ignores the step
// are tried in batches, as PushSet applies them (checkRows); otherwise each
// key's row is tried on its own.
func (t *Table) CheckPush(keys []uint64, grads []float32) error {
	d := t.dim
	if len(grads) != len(keys)*d {
		return fmt.Errorf("%w: Push of %d keys with Dim %d needs %d floats, got %d", ErrShape, len(keys), d, len(keys)*d, len(grads))
	}
	tr := &t.trial
	t.distinctKeys(keys)
	if len(tr.dkeys) == len(keys) && optim.PerCoordinate(t.rule) {
		if t.keepCount {
			return t.checkCounted(tr.drows, keys, grads, true)
		}
		return t.checkRows(tr.drows, keys, grads, true)
	}
	return t.checkEach(keys, grads)
}

// distinctKeys sets the trial's dkeys to the distinct keys of keys, in
// order of first use, and drows to their rows (-1: none).
func (t *Table) distinctKeys(keys []uint64) {
	tr := &t.trial
	size := 1 << bits.Len(uint(2*len(keys)))
	if cap(tr.at) < size {
		tr.at = make([]int32, size)
	}
	tr.at = tr.at[:size]
	at := tr.at
	clear(at)
	mask := uint64(size - 1)
	tr.dkeys, tr.drows = tr.dkeys[:0], tr.drows[:0]
	var la lookahead
	la.start(t, keys)
	for i, k := range keys {
		h := la.at(t, i)
		s := h & mask
		for at[s] != 0 && tr.dkeys[at[s]-1] != k {
			s = (s + 1) & mask
		}
		if at[s] != 0 {
			continue
		}
		tr.dkeys = append(tr.dkeys, k)
		at[s] = int32(len(tr.dkeys))
		tr.drows = append(tr.drows, int32(t.lookup(k, h)))
	}
}

// position returns the place of k in the trial's dkeys (distinctKeys).
func (tr *trial) position(k uint64) int {
	mask := uint64(len(tr.at) - 1)
	for s := hashKey(k) & mask; ; s = (s + 1) & mask {
		if j := tr.at[s] - 1; tr.dkeys[j] == k {
			return int(j)
		}
	}
}

// checkEach is CheckPush one key at a time, on copies of the distinct rows
// (distinctKeys) in tr.rows.
func (t *Table) checkEach(keys []uint64, grads []float32) error {
	d, stride := t.dim, t.stride
	tr := &t.trial
	if cap(tr.views) < t.slots {
		tr.views = make([][]float32, t.slots)
	}
	views := tr.views[:t.slots]
	defer func() {
		clear(views)
		tr.rows, tr.count = tr.rows[:0], tr.count[:0]
	}()
	for j, k := range tr.dkeys {
		tr.rows = append(tr.rows, make([]float32, stride)...)
		row := tr.rows[j*stride : (j+1)*stride : (j+1)*stride]
		var n int64
		if r := int(tr.drows[j]); r >= 0 {
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
	for i, k := range keys {
		j := i
		if len(tr.dkeys) != len(keys) {
			j = tr.position(k)
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
	if !ks.distinct || !optim.PerCoordinate(t.rule) {
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
	check := t.checkRows
	if t.keepCount {
		check = t.checkCounted
	}
	if err := check(ks.rows, ks.keys, grads, false); err != nil {
		return err
	}
	if len(tr.keys) == 0 {
		return nil
	}
	return t.CheckPush(tr.keys, tr.grads)
}

// checkRows runs the rule on copies of the distinct rows, gathered
// batchRows values at a time as pushBatched gathers them, and names the
// first key whose value or state would not be finite. A row of -1 is
// skipped, or with initMissing tried as the new row its key would get.
func (t *Table) checkRows(rows []int32, keys []uint64, grads []float32, initMissing bool) error {
	d, slots, stride := t.dim, t.slots, t.stride
	per, val, gb, state := t.batchScratch()
	tr := &t.trial
	if cap(tr.idx) < per {
		tr.idx = make([]int32, per)
	}
	idx := tr.idx[:per]
	for lo := 0; lo < len(rows); lo += per {
		hi := min(lo+per, len(rows))
		n := 0
		for i := lo; i < hi; i++ {
			// Ask for the rows some keys ahead, as pushBatched does: a
			// push's rows are mostly out of cache.
			if j := i + aheadBucket; j < hi && rows[j] >= 0 {
				t.prefetchRow(int(rows[j]))
			}
			r := int(rows[i])
			switch {
			case r >= 0 && d == 1:
				// One value: plain loads, not a copy call per float.
				row := t.pages[r>>t.pageShift].data[(r&t.pageMask)*stride:][:stride:stride]
				val[n] = row[0]
				for s := range slots {
					state[s*per+n] = row[s+1]
				}
				gb[n] = grads[i]
				idx[n] = int32(i)
				n++
				continue
			case r >= 0:
				row := t.pages[r>>t.pageShift].data[(r&t.pageMask)*stride:][:stride:stride]
				copy(val[n*d:(n+1)*d], row[:d])
				for s := range slots {
					copy(state[(s*per+n)*d:(s*per+n+1)*d], row[(s+1)*d:(s+2)*d])
				}
			case initMissing:
				t.init.Init(keys[i], val[n*d:(n+1)*d:(n+1)*d])
				if slots > 0 {
					for s := range slots {
						v := state[(s*per+n)*d : (s*per+n+1)*d : (s*per+n+1)*d]
						clear(v)
						t.views[s] = v
					}
					t.rule.InitState(t.views)
				}
			default:
				continue
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

// checkCounted is checkRows for a rule that reads its step: the rows of a
// batch are tried in runs of the same update count (byCount), as
// pushCounted applies them, and the first key of the batch (in key order)
// whose row would not be finite is named with its row's first value or
// state (in row order) that would not be.
func (t *Table) checkCounted(rows []int32, keys []uint64, grads []float32, initMissing bool) error {
	d, slots := t.dim, t.slots
	per, val, gb, state := t.batchScratch()
	for lo := 0; lo < len(rows); lo += per {
		g := t.byCount(rows, lo, min(lo+per, len(rows)), initMissing)
		bad, badX := -1, float32(0)
		t.countRuns(rows, keys, grads, g, per, val, gb, state, func(run []uint64, _ uint64) {
			for n, e := range run {
				i := int(uint32(e))
				if bad >= 0 && i > bad {
					continue
				}
				x, ok := firstNotFinite(val[n*d : (n+1)*d])
				for s := 0; s < slots && !ok; s++ {
					x, ok = firstNotFinite(state[(s*per+n)*d : (s*per+n+1)*d])
				}
				if ok {
					bad, badX = i, x
				}
			}
		})
		if bad >= 0 {
			return fmt.Errorf("%w: key %d: the update by its gradient would make its row %v", ErrNotFinite, keys[bad], badX)
		}
	}
	return nil
}

// firstNotFinite returns the first of xs that is NaN or ±Inf.
func firstNotFinite(xs []float32) (float32, bool) {
	for _, x := range xs {
		if notFinite(x) {
			return x, true
		}
	}
	return 0, false
}
