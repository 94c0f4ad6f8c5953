package sparsedata

import (
	"errors"
	"io"
)

// Dataset is a set of examples in compressed sparse row form: example i has
// label Labels[i] and features Keys[Offsets[i]:Offsets[i+1]] with values
// Vals[Offsets[i]:Offsets[i+1]]. It costs 12 bytes per non-zero plus 12 per
// row, with no per-example allocation.
//
// The zero Dataset is empty and ready to use. A Dataset is not safe for
// concurrent mutation; concurrent reads are fine.
type Dataset struct {
	Labels  []float32
	Offsets []int // len(Labels)+1 entries once non-empty; Offsets[0] == 0
	Keys    []uint64
	Vals    []float32
}

// Len is the number of examples.
func (d *Dataset) Len() int { return len(d.Labels) }

// NNZ is the total number of stored features.
func (d *Dataset) NNZ() int { return len(d.Keys) }

// Append copies ex to the end of d.
func (d *Dataset) Append(ex *Example) {
	if len(d.Offsets) == 0 {
		d.Offsets = append(d.Offsets, 0)
	}
	d.Labels = append(d.Labels, ex.Label)
	d.Keys = append(d.Keys, ex.Keys...)
	d.Vals = append(d.Vals, ex.Vals...)
	d.Offsets = append(d.Offsets, len(d.Keys))
}

// At returns example i. Its slices alias d's storage (capacity-limited, so
// appending to them cannot overwrite the next example); copy it with Clone
// before modifying it.
func (d *Dataset) At(i int) Example {
	lo, hi := d.Offsets[i], d.Offsets[i+1]
	return Example{Label: d.Labels[i], Keys: d.Keys[lo:hi:hi], Vals: d.Vals[lo:hi:hi]}
}

// MaxKey returns the largest key in d and false if d has no keys.
func (d *Dataset) MaxKey() (uint64, bool) {
	if len(d.Keys) == 0 {
		return 0, false
	}
	m := d.Keys[0]
	for _, k := range d.Keys[1:] {
		m = max(m, k)
	}
	return m, true
}

// ReadAll drains src into a new Dataset. It returns the examples read
// before an error together with that error.
func ReadAll(src Source) (*Dataset, error) {
	d := &Dataset{}
	for {
		ex, err := src.Next()
		if errors.Is(err, io.EOF) {
			return d, nil
		}
		if err != nil {
			return d, err
		}
		d.Append(ex)
	}
}
