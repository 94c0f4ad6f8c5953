package shard

import (
	"math"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// A sparse push is refused whole when its result would not be finite, so
// checkPush tries it on copies of its rows first: a second pass over every
// row it touches, which cost about as much as the push itself (on the data
// path's 100k keys × 8 push+pull, 36% of the ps's CPU against 13% for the
// update). As bound.go does for a variable, a table whose rule can bound
// its result (optim.Bounded) keeps ranges that hold every value and each
// state slot of its rows, and a push whose bound stays well inside float32
// skips the trial. The ranges hold every row the table has:
//
//   - measured over the rows in memory (sparse.Table.Ranges), joined with
//     what a new row starts at (the initializer's range, the rule's initial
//     state), since a pull or a push may create rows at any time;
//   - carried forward by a push that skipped its trial: the rows it updates
//     end in the rule's bound of the ranges, the others stay where they
//     were, so the new ranges are the join of the two.
//
// Only a push whose keys are a key set with a row for every key, no two the
// same (sparse.KeySet.Resolved), skips its trial: each row is then updated
// exactly once, and none is created. Tables with a disk tier (rows out of
// memory are not measured) and rules that read a row's update count keep
// the trial. Any push that ran its trial, or a change made by another path
// (a restore, a replica's copy, a synchronous step's sum), loses the ranges;
// they are measured again once the pushes tried since add up to as many
// keys as the table holds (so measuring costs at most what those trials
// did), and at doubling intervals while measured ranges cannot bound a
// push. The update is the same either way: results are bit-identical.
type tableBound struct {
	ok    bool
	param optim.Range
	state []optim.Range

	// next: the ranges after the push checked last, for push to take if
	// it applies that push (grad is the gradient it was checked for).
	next      tableRanges
	nextGrad  *float32
	nextValid bool

	tried int64 // pushes tried on copies
	owed  int64 // keys pushed with a trial since the ranges were lost
	need  int64 // owed keys that buy measuring again (0: as many as the table holds)

	init      tableRanges // what a new row starts at
	initKnown bool
}

type tableRanges struct {
	param optim.Range
	state []optim.Range
}

// initRange is the range of the values a new row of spec starts at: zeros,
// or normal draws of the spec's stddev (sparse.RandomNormal: Box-Muller
// from 53-bit uniforms, so |z| <= sqrt(-2 ln 2^-53) < 8.6).
func initRange(spec TableSpec) optim.Range {
	if spec.Initializer == "normal" {
		m := 9 * math.Abs(spec.InitStddev)
		return optim.Range{Lo: -m, Hi: m}
	}
	return optim.Range{}
}

// join is the smallest range holding a and b.
func join(a, b optim.Range) optim.Range {
	return optim.Range{Lo: min(a.Lo, b.Lo), Hi: max(a.Hi, b.Hi)}
}

// boundedPush reports whether the push of grads (whose largest |value| is
// known, if above 0) to set's rows, at the rule
// the table runs now (checkPush scheduled it), is shown finite by the
// table's ranges; if so it keeps the ranges after it for push. False
// means: try it on copies.
func (t *table) boundedPush(set *sparse.KeySet, grads []float32, known float32) bool {
	b := &t.bnd
	b.nextValid, b.nextGrad = false, nil
	rule, ok := t.t.Rule().(optim.Bounded)
	if !ok || set == nil || t.tier != nil || t.t.KeepsCount() || len(grads) == 0 || !set.Resolved(t.t) {
		return false
	}
	if !b.ok {
		if b.owed < max(b.need, int64(t.t.Len())) {
			return false
		}
		t.measure()
		if !b.ok {
			// A value beyond the bounds' reach: measure again less often.
			b.need = max(2*b.need, int64(t.t.Len()))
			return false
		}
	}
	g, ok := gradMax(grads, known)
	if !ok {
		return false
	}
	n := &b.next
	n.param = b.param
	n.state = append(n.state[:0], b.state...)
	ok = rule.Bound(&n.param, n.state, g, 1) && widen(&n.param)
	for i := range n.state {
		ok = ok && widen(&n.state[i])
	}
	if !ok {
		// Not even these ranges bound it: try this push, and measure
		// again later, less often each time it does not help.
		b.ok, b.owed = false, 0
		b.need = max(2*b.need, int64(t.t.Len()))
		return false
	}
	n.param = join(n.param, b.param)
	for i := range n.state {
		n.state[i] = join(n.state[i], b.state[i])
	}
	b.nextValid, b.nextGrad = true, &grads[0]
	return true
}

// measure sets the ranges to those of the rows in memory joined with a
// new row's; it leaves them lost if one is not finite or beyond
// boundLimit.
func (t *table) measure() {
	b := &t.bnd
	b.ok, b.owed = false, 0
	if !b.initKnown {
		rule := t.t.Rule()
		b.init.param = initRange(t.spec)
		st := make([][]float32, rule.StateSlots())
		for i := range st {
			st[i] = make([]float32, t.t.Dim())
		}
		rule.InitState(st)
		b.init.state = b.init.state[:0]
		for _, s := range st {
			r, ok := measure(s)
			if !ok {
				return
			}
			b.init.state = append(b.init.state, r)
		}
		b.initKnown = true
	}
	param, state, ok := t.t.Ranges()
	if !ok || len(state) != len(b.init.state) {
		return
	}
	b.param = join(param, b.init.param)
	b.state = b.state[:0]
	for i, r := range state {
		b.state = append(b.state, join(r, b.init.state[i]))
	}
	ok = widen(&b.param)
	for i := range b.state {
		ok = ok && widen(&b.state[i])
	}
	b.ok = ok
}

// rebound brings the ranges up to date after a push of n keys by grads:
// those boundedPush kept for it, or none.
func (t *table) rebound(grads []float32, n int) {
	b := &t.bnd
	if b.ok && b.nextValid && len(grads) > 0 && b.nextGrad == &grads[0] {
		b.param = b.next.param
		b.state = append(b.state[:0], b.next.state...)
	} else {
		b.ok = false
		b.owed += int64(n)
	}
	b.nextValid, b.nextGrad = false, nil
}

// loseBound forgets the ranges and what a new row starts at: the rows
// changed by a path that does not carry them (a restore, a replica's
// copy), or the rule changed.
func (t *table) loseBound() { t.bnd = tableBound{tried: t.bnd.tried} }

// dropPending forgets the ranges kept for a push that was checked but not
// applied (refused, dropped as stale): push takes them only for the
// gradient they were made for, and a request buffer is used again.
func dropPending(tabs []*table) {
	for _, t := range tabs {
		t.bnd.nextValid, t.bnd.nextGrad = false, nil
	}
}
