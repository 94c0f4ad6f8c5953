package sparsedata

import "slices"

// Example is one labelled sparse row. Keys and Vals have the same length;
// Vals[i] is the value of feature Keys[i]. Label is 0 or 1.
type Example struct {
	Label float32
	Keys  []uint64
	Vals  []float32
}

// Reset empties e, keeping the capacity of its slices.
func (e *Example) Reset() {
	e.Label = 0
	e.Keys = e.Keys[:0]
	e.Vals = e.Vals[:0]
}

// Clone returns a deep copy of e that shares no memory with it.
func (e *Example) Clone() Example {
	return Example{Label: e.Label, Keys: slices.Clone(e.Keys), Vals: slices.Clone(e.Vals)}
}

// Stats counts what a reader has seen so far.
type Stats struct {
	Lines    int64 // physical lines scanned, including those of other workers
	Examples int64 // examples returned
	Skipped  int64 // malformed lines of this worker skipped (SkipBadLines)
}

// Add returns the field-wise sum of s and t.
func (s Stats) Add(t Stats) Stats {
	return Stats{Lines: s.Lines + t.Lines, Examples: s.Examples + t.Examples, Skipped: s.Skipped + t.Skipped}
}

// Source is what the readers of packages libsvm and criteo implement.
//
// Next returns the next example of this worker's part, or io.EOF after the
// last one. The example and its slices belong to the Source and are valid
// only until the next call of Next.
type Source interface {
	Next() (*Example, error)
	Stats() Stats
}
