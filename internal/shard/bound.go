package shard

import (
	"math"

	"github.com/paramserv/paramserv/internal/format"
	"github.com/paramserv/paramserv/internal/optim"
)

// An update is refused whole when its result would not be finite
// (checkResult). Trying it on copies first costs about one more update
// pass, so a variable whose rule can bound its result (optim.Bounded) keeps
// ranges that hold its values and each state slot: from them and the
// largest |gradient| (one read of the gradient) the rule bounds what the
// update makes, and when every bound stays well inside float32 the update
// cannot overflow and the trial is skipped. The ranges are measured from
// the values after an update that had to be tried (or the first one), and
// carried forward by the rule's bounds otherwise; they are loose upper
// bounds, so a variable whose values really grow towards the float32 limit
// is tried on copies again, which measures them afresh. The update itself
// is the same either way: results are bit-identical.

// boundLimit is the largest magnitude a bound may reach for the update to
// count as finite without a trial: half the float32 range, far beyond the
// float64 rounding the bounds and the rules do.
const boundLimit = math.MaxFloat32 / 2

// remeasureEvery is how many updates (tried on copies) pass before ranges
// that could not bound an update are measured again.
const remeasureEvery = 64

// varBound holds ranges of a variable's values and of each state slot;
// ok false when they are not known.
type varBound struct {
	ok    bool
	param optim.Range
	state []optim.Range
	step  int64    // next: the update count it is for
	grad  *float32 // next: the gradient it is for
}

// bounded reports whether the rule's bounds show that the update of v by
// grad at update count step leaves every value and state finite; if so, it
// keeps the ranges after it in v.next for rebound.
func bounded(v *Var, rule optim.Rule, grad []float32, known float32, step int64) bool {
	v.next.ok, v.next.grad = false, nil
	b, ok := rule.(optim.Bounded)
	if !ok || len(grad) == 0 {
		return false
	}
	fresh := false
	if !v.bnd.ok {
		// Ranges not known (the first update, or one tried on copies):
		// measure them, at the cost of one read of value and state.
		if v.updates < v.bndRetry {
			return false
		}
		remeasure(v)
		fresh = true
	}
	if v.bnd.ok {
		g, ok := gradMax(grad, known)
		if !ok {
			return false
		}
		n := &v.next
		n.param = v.bnd.param
		n.state = append(n.state[:0], v.bnd.state...)
		ok = b.Bound(&n.param, n.state, g, step) && widen(&n.param)
		for i := range n.state {
			ok = ok && widen(&n.state[i])
		}
		if ok {
			n.ok, n.step, n.grad = true, step, &grad[0]
			return true
		}
	}
	if fresh {
		// Even measured ranges do not bound the update: the values are
		// large or the state at an edge. Measuring again at once would
		// not help; try updates on copies for a while.
		v.bndRetry = v.updates + remeasureEvery
	}
	return false
}

// rebound brings v.bnd up to date after v was updated by grad: the ranges
// bounded kept for this update, or none (an update tried on copies, or one
// applied without a check, as a replica's): the next check measures them.
func rebound(v *Var, grad []float32) {
	if v.next.ok && v.next.step == v.updates && len(grad) > 0 && v.next.grad == &grad[0] {
		v.bnd, v.next = v.next, v.bnd
	} else {
		v.bnd.ok = false
	}
	v.next.ok, v.next.grad, v.bnd.grad = false, nil, nil
}

// remeasure sets v.bnd to the ranges of v's values and state now; it
// leaves it not ok if one is beyond boundLimit.
func remeasure(v *Var) {
	v.bnd.ok = false
	var ok bool
	if v.bnd.param, ok = measure(v.value); !ok {
		return
	}
	v.bnd.state = v.bnd.state[:0]
	for _, st := range v.state {
		r, ok := measure(st)
		if !ok {
			return
		}
		v.bnd.state = append(v.bnd.state, r)
	}
	v.bnd.ok = true
}

// widen makes r hold the float32 roundings of what it holds, with a margin
// for the float64 rounding of the bounds themselves; it reports whether r
// stays within boundLimit (false for NaN). A lower bound of zero or more
// stays as it is: rounding keeps such a value at or above it.
func widen(r *optim.Range) bool {
	if r.Hi > 0 {
		r.Hi = r.Hi*(1+1e-6) + 1e-44
	}
	if r.Lo < 0 {
		r.Lo = r.Lo*(1+1e-6) - 1e-44
	}
	return r.Lo >= -boundLimit && r.Hi <= boundLimit
}

// measure is the range of xs; false if one is not finite or beyond
// boundLimit.
func measure(xs []float32) (optim.Range, bool) {
	if len(xs) == 0 {
		return optim.Range{}, true
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo = min(lo, x)
		hi = max(hi, x)
	}
	r := optim.Range{Lo: float64(lo), Hi: float64(hi)}
	return r, r.Lo >= -boundLimit && r.Hi <= boundLimit
}

// gradMax is the largest |x| of g: known, if above 0 (the caller found it
// as it checked g), else maxAbs's.
func gradMax(g []float32, known float32) (float64, bool) {
	if known > 0 && known <= math.MaxFloat32 {
		return float64(known), true
	}
	return maxAbs(g)
}

// maxAbs is the largest |x| of g, and false if one is NaN or ±Inf.
func maxAbs(g []float32) (float64, bool) {
	m := format.MaxAbsBits(g)
	if m >= format.NotFiniteBits {
		return 0, false
	}
	return float64(math.Float32frombits(m)), true
}
