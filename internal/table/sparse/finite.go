package sparse

import (
	"fmt"
	"math"
)

// trial is the scratch of CheckPush: a copy of each distinct row a push
// updates (value and state slots), its update count, and where each key's
// copy is.
type trial struct {
	rows  []float32
	count []int64
	at    map[uint64]int
	views [][]float32
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
