package optim

import "math"

// Range is a closed interval [Lo, Hi] of float64 that holds every element
// of a slice.
type Range struct{ Lo, Hi float64 }

// Mag is the largest magnitude in r.
func (r Range) Mag() float64 { return max(math.Abs(r.Lo), math.Abs(r.Hi)) }

// Bounded is a Rule that can bound what one Update makes from bounds on what
// it is given, so that a caller that must refuse an update whose result is
// not finite can rule overflow and NaN out without running the update on
// copies first. A rule that does not implement it (or whose Bound returns
// false) is tried on copies instead: Bound is an optimisation, never needed
// for correctness.
type Bounded interface {
	Rule
	// Bound is given ranges holding every parameter value (param) and every
	// value of each state slot (state, StateSlots() of them), all finite,
	// and the largest |gradient| g (finite). It sets them to ranges that
	// hold the values one Update at step computes, before their rounding to
	// float32, and returns true; or it returns false where its bounds cannot
	// exclude a NaN (a square root of a negative accumulator, 0/0). Upper
	// bounds may be loose: an infinite one only means the caller looks
	// itself. A lower bound that keeps a slot non-negative or positive must
	// be exact.
	Bound(param *Range, state []Range, g float64, step int64) bool
}

// sym is the range [-m, m].
func sym(m float64) Range { return Range{-m, m} }

func (r *sgd) Bound(param *Range, state []Range, g float64, _ int64) bool {
	*param = sym(param.Mag() + math.Abs(r.lr)*g)
	return len(state) == 0
}

func (r *momentum) Bound(param *Range, state []Range, g float64, _ int64) bool {
	if len(state) != 1 {
		return false
	}
	lr, mu := math.Abs(r.lr), math.Abs(r.mu)
	a := mu*state[0].Mag() + g
	p := param.Mag() + lr*a
	if r.nesterov {
		p = param.Mag() + lr*g + lr*mu*a
	}
	state[0], *param = sym(a), sym(p)
	return true
}

func (r *adagrad) Bound(param *Range, state []Range, g float64, _ int64) bool {
	// a = acc + g² >= acc.Lo; the step is lr*g/(sqrt(a)+eps), finite when
	// sqrt(acc.Lo)+eps > 0.
	if len(state) != 1 || !(state[0].Lo >= 0) || !(r.eps >= 0) {
		return false
	}
	d := math.Sqrt(state[0].Lo) + r.eps
	if !(d > 0) {
		return false
	}
	state[0].Hi += g * g
	*param = sym(param.Mag() + math.Abs(r.lr)*g/d)
	return true
}

func (r *adam) Bound(param *Range, state []Range, g float64, step int64) bool {
	// v stays >= 0 when b2 is in [0, 1]; the step is lrt*m/(sqrt(v)+eps) with
	// |m/(sqrt(v)+eps)| <= |m|/eps.
	if len(state) != 2 || !(state[1].Lo >= 0) || !(r.b2 >= 0 && r.b2 <= 1) || !(r.eps > 0) {
		return false
	}
	t := float64(max(step, 1))
	lrt := r.lr * math.Sqrt(1-math.Pow(r.b2, t)) / (1 - math.Pow(r.b1, t))
	m := math.Abs(r.b1)*state[0].Mag() + math.Abs(1-r.b1)*g
	state[0] = sym(m)
	state[1] = Range{state[1].Lo * r.b2, r.b2*state[1].Hi + (1-r.b2)*g*g}
	*param = sym(param.Mag() + math.Abs(lrt)*m/r.eps)
	return true
}

func (r *ftrl) Bound(param *Range, state []Range, g float64, _ int64) bool {
	// n grows (n' = n + g² >= n.Lo >= 0); the denominator is at least
	// (beta+n.Lo^q)/alpha + 2*l2 (q = -learning_rate_power >= 0), which
	// must be positive.
	if len(state) != 2 || !(state[0].Lo >= 0) || !(r.alpha > 0) || !(r.beta >= 0) || !(r.l2 >= 0) || !(r.power <= 0) {
		return false
	}
	inv, q := 1/r.alpha, -r.power
	n1 := state[0].Hi + g*g
	var root, sigma float64
	if r.power == -0.5 {
		// sqrt(n+g²) - sqrt(n) <= |g|, plus the rounding of the two roots.
		root = math.Sqrt(state[0].Lo)
		sigma = (g + 1e-15*math.Sqrt(n1)) * inv
	} else {
		// n^q is non-decreasing: the step's increase is at most n1^q.
		root = math.Pow(state[0].Lo, q)
		sigma = math.Pow(n1, q) * (1 + 1e-15) * inv
	}
	den := (r.beta+root)*inv + 2*r.l2
	if !(den > 0) {
		return false
	}
	z := state[1].Mag() + g + 2*math.Abs(r.shrink)*param.Mag() + sigma*param.Mag()
	state[0].Hi = n1
	state[1] = sym(z)
	*param = sym((z + math.Abs(r.l1)) / den)
	return true
}
