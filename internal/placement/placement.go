// Package placement decides which parameter server holds what: dense
// variables round-robin over the ps tasks (as TensorFlow's
// replica_device_setter does), a variable larger than a threshold split
// along its first dimension across all of them, and sparse keys by a jump
// consistent hash. Everything here is a pure function of the number of ps
// tasks and the variable list, so every worker computes the same plan.
package placement

import (
	"fmt"

	"github.com/paramserv/paramserv/internal/mix"
	"github.com/paramserv/paramserv/internal/model"
)

// DefaultSplitBytes is the size above which a dense variable is split across
// all ps tasks: 4 MiB, a million float32 values.
const DefaultSplitBytes = 4 << 20

// Part is one contiguous piece of a variable held on one ps: the flat
// elements [Offset, Offset+Len) of the variable, stored on the ps under Name.
type Part struct {
	PS     int
	Name   string // the shard-local name: the variable's name, or "name/part_k"
	Offset int
	Len    int
	Shape  []int // the part's shape: the variable's, with the first dimension cut
}

// Var is a variable and its parts, in order of Offset.
type Var struct {
	model.Variable
	Parts []Part
}

// Plan places a model's dense variables on numPS ps tasks.
type Plan struct {
	NumPS int
	Vars  []Var
}

// Place computes the plan. A variable of more than splitBytes bytes whose
// first dimension has at least two rows is split into min(numPS, rows)
// parts of near-equal row counts, part k on ps k; every other variable goes
// whole to the next ps in round-robin order. splitBytes <= 0 means
// DefaultSplitBytes.
func Place(numPS int, vars []model.Variable, splitBytes int) (Plan, error) {
	if numPS < 1 {
		return Plan{}, fmt.Errorf("placement: need at least one ps task, got %d", numPS)
	}
	if splitBytes <= 0 {
		splitBytes = DefaultSplitBytes
	}
	plan := Plan{NumPS: numPS}
	seen := make(map[string]bool, len(vars))
	next := 0
	for _, v := range vars {
		if v.Name == "" {
			return Plan{}, fmt.Errorf("placement: a variable has an empty name")
		}
		if seen[v.Name] {
			return Plan{}, fmt.Errorf("placement: variable %q listed twice", v.Name)
		}
		seen[v.Name] = true
		for _, d := range v.Shape {
			if d <= 0 {
				return Plan{}, fmt.Errorf("placement: variable %q has shape %v; every dimension must be positive", v.Name, v.Shape)
			}
		}
		size := v.Size()
		pv := Var{Variable: v}
		rows := 1
		if len(v.Shape) > 0 {
			rows = v.Shape[0]
		}
		if size*4 > splitBytes && numPS > 1 && rows > 1 {
			n := min(numPS, rows)
			rowLen := size / rows
			start := 0
			for k := 0; k < n; k++ {
				r := rows / n
				if k < rows%n {
					r++
				}
				shape := append([]int{r}, v.Shape[1:]...)
				pv.Parts = append(pv.Parts, Part{PS: k, Name: fmt.Sprintf("%s/part_%d", v.Name, k), Offset: start * rowLen, Len: r * rowLen, Shape: shape})
				start += r
			}
		} else {
			pv.Parts = []Part{{PS: next % numPS, Name: v.Name, Offset: 0, Len: size, Shape: append([]int(nil), v.Shape...)}}
			next++
		}
		plan.Vars = append(plan.Vars, pv)
	}
	return plan, nil
}

// OnPS returns the parts held by ps, in plan order.
func (p Plan) OnPS(ps int) []Part {
	var parts []Part
	for _, v := range p.Vars {
		for _, part := range v.Parts {
			if part.PS == ps {
				parts = append(parts, part)
			}
		}
	}
	return parts
}

// KeyShard returns the ps that owns sparse key k among numPS: a jump
// consistent hash (Lamping and Veach, 2014) of the key after a 64-bit mix,
// so that sequential ids spread evenly and growing the number of ps moves
// only 1/numPS of the keys.
func KeyShard(k uint64, numPS int) int {
	k = mix.SplitMix64(k)
	var b, j int64 = -1, 0
	for j < int64(numPS) {
		b = j
		k = k*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((k>>33)+1)))
	}
	return int(b)
}
