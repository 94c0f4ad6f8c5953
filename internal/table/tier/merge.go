package tier

import (
	"math"
	"slices"

	"github.com/paramserv/paramserv/internal/table/sparse"
)

// Merge is the rows of a and b, two snapshots of one table's tiers (no key
// in both), in ascending key order: the whole table, for a checkpoint.
// LastTouch and Updates are kept where both have them.
func Merge(a, b sparse.Snapshot) sparse.Snapshot {
	if len(b.Keys) == 0 {
		return a
	}
	if len(a.Keys) == 0 {
		b.Dim = a.Dim
		if a.Updates == nil {
			b.Updates = nil
		}
		if a.LastTouch == nil {
			b.LastTouch = nil
		}
		return b
	}
	d, n := a.Dim, len(a.Keys)+len(b.Keys)
	m := sparse.Snapshot{Dim: d, Keys: make([]uint64, 0, n), Values: make([]float32, 0, n*d), State: make([][]float32, len(a.State))}
	for i := range m.State {
		m.State[i] = make([]float32, 0, n*d)
	}
	if a.Updates != nil && b.Updates != nil {
		m.Updates = make([]uint32, 0, n)
	}
	if a.LastTouch != nil && b.LastTouch != nil {
		m.LastTouch = make([]int64, 0, n)
	}
	take := func(s *sparse.Snapshot, i int) {
		m.Keys = append(m.Keys, s.Keys[i])
		m.Values = append(m.Values, s.Values[i*d:(i+1)*d]...)
		for j := range m.State {
			m.State[j] = append(m.State[j], s.State[j][i*d:(i+1)*d]...)
		}
		if m.Updates != nil {
			m.Updates = append(m.Updates, s.Updates[i])
		}
		if m.LastTouch != nil {
			m.LastTouch = append(m.LastTouch, s.LastTouch[i])
		}
	}
	i, j := 0, 0
	for i < len(a.Keys) || j < len(b.Keys) {
		if j == len(b.Keys) || i < len(a.Keys) && a.Keys[i] < b.Keys[j] {
			take(&a, i)
			i++
		} else {
			take(&b, j)
			j++
		}
	}
	return m
}

func mathBits(x float32) uint32 { return math.Float32bits(x) }

// sortSnapshot returns s in ascending key order (s itself if it is).
func sortSnapshot(s sparse.Snapshot) sparse.Snapshot {
	if slices.IsSorted(s.Keys) {
		return s
	}
	order := make([]int, len(s.Keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case s.Keys[a] < s.Keys[b]:
			return -1
		case s.Keys[a] > s.Keys[b]:
			return 1
		}
		return 0
	})
	d := s.Dim
	out := sparse.Snapshot{Dim: d, Keys: make([]uint64, len(order)), Values: make([]float32, len(s.Values)), State: make([][]float32, len(s.State))}
	for j := range out.State {
		out.State[j] = make([]float32, len(s.State[j]))
	}
	if s.Updates != nil {
		out.Updates = make([]uint32, len(order))
	}
	if s.LastTouch != nil {
		out.LastTouch = make([]int64, len(order))
	}
	for i, o := range order {
		out.Keys[i] = s.Keys[o]
		copy(out.Values[i*d:(i+1)*d], s.Values[o*d:(o+1)*d])
		for j := range out.State {
			copy(out.State[j][i*d:(i+1)*d], s.State[j][o*d:(o+1)*d])
		}
		if s.Updates != nil {
			out.Updates[i] = s.Updates[o]
		}
		if s.LastTouch != nil {
			out.LastTouch[i] = s.LastTouch[o]
		}
	}
	return out
}
