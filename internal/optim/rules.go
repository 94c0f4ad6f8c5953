package optim

import (
	"fmt"
	"math"
)

// The rules below share a shape: hyper-parameters fixed by New, Update
// checks the lengths once (a mismatch is a bug in the caller, and panics with
// the lengths in the message), re-slices the inputs to len(param) so the
// compiler drops the bounds checks, then runs one loop that does not
// allocate. Arithmetic is float64, rounded once per stored value. Where a
// rule has a vector kernel (kernels_amd64.go), the kernel does the first
// values and the loop the rest.

// checkLens panics unless grad and the slots state slices are all as long
// as param.
func checkLens(rule string, slots int, param, grad []float32, state [][]float32) {
	if len(grad) != len(param) {
		panic(fmt.Sprintf("optim: %s: len(grad) = %d, want len(param) = %d", rule, len(grad), len(param)))
	}
	checkSlots(rule, slots, state)
	for i, s := range state {
		if len(s) != len(param) {
			panic(fmt.Sprintf("optim: %s: len(state[%d]) = %d, want len(param) = %d", rule, i, len(s), len(param)))
		}
	}
}

// checkSlots panics unless state holds slots slices.
func checkSlots(rule string, slots int, state [][]float32) {
	if len(state) != slots {
		panic(fmt.Sprintf("optim: %s: len(state) = %d, want StateSlots() = %d", rule, len(state), slots))
	}
}

// sgd is plain gradient descent: p -= lr*g.
type sgd struct {
	lr float64
}

func newSGD(cfg Config) (Rule, error) {
	return &sgd{lr: cfg.LearningRate}, nil
}

func (r *sgd) Name() string             { return "sgd" }
func (r *sgd) withRate(lr float64) Rule { c := *r; c.lr = lr; return &c }

func (r *sgd) StateSlots() int { return 0 }

func (r *sgd) InitState(state [][]float32) { checkSlots("sgd", 0, state) }

func (r *sgd) Update(param, grad []float32, state [][]float32, _ int64) {
	checkLens("sgd", 0, param, grad, state)
	g := grad[:len(param)]
	lr := r.lr
	for i := sgdKernel(param, g, lr); i < len(param); i++ {
		param[i] = float32(float64(param[i]) - lr*float64(g[i]))
	}
}

// momentum is TF's ApplyMomentum; state [accum].
type momentum struct {
	lr, mu   float64
	nesterov bool
}

func newMomentum(cfg Config) (Rule, error) {
	return &momentum{
		lr:       cfg.LearningRate,
		mu:       cfg.Momentum,
		nesterov: cfg.Nesterov,
	}, nil
}

func (r *momentum) Name() string             { return "momentum" }
func (r *momentum) withRate(lr float64) Rule { c := *r; c.lr = lr; return &c }

func (r *momentum) StateSlots() int { return 1 }

func (r *momentum) InitState(state [][]float32) {
	checkSlots("momentum", 1, state)
	clear(state[0])
}

func (r *momentum) Update(param, grad []float32, state [][]float32, _ int64) {
	checkLens("momentum", 1, param, grad, state)
	g := grad[:len(param)]
	acc := state[0][:len(param)]
	lr, mu := r.lr, r.mu
	lrmu := lr * mu
	k := [3]float64{lr, mu, lrmu}
	if r.nesterov {
		for i := momentumKernel(param, g, acc, &k, true); i < len(param); i++ {
			p, gi := param[i], float64(g[i])
			a := mu*float64(acc[i]) + gi
			acc[i] = float32(a)
			param[i] = float32(float64(p) - (lr*gi + lrmu*a))
		}
		return
	}
	for i := momentumKernel(param, g, acc, &k, false); i < len(param); i++ {
		p := param[i]
		a := mu*float64(acc[i]) + float64(g[i])
		acc[i] = float32(a)
		param[i] = float32(float64(p) - lr*a)
	}
}

// adagrad is TF1's ApplyAdagrad (TF2's ApplyAdagradV2 when eps > 0); state
// [accum].
type adagrad struct {
	lr, init, eps float64
}

func newAdagrad(cfg Config) (Rule, error) {
	return &adagrad{
		lr:   cfg.LearningRate,
		init: cfg.InitialAccumulator,
		eps:  cfg.Epsilon, // 0 by default, as TF1
	}, nil
}

func (r *adagrad) Name() string             { return "adagrad" }
func (r *adagrad) withRate(lr float64) Rule { c := *r; c.lr = lr; return &c }

func (r *adagrad) StateSlots() int { return 1 }

func (r *adagrad) InitState(state [][]float32) {
	checkSlots("adagrad", 1, state)
	fill(state[0], float32(r.init))
}

func (r *adagrad) Update(param, grad []float32, state [][]float32, _ int64) {
	checkLens("adagrad", 1, param, grad, state)
	g := grad[:len(param)]
	acc := state[0][:len(param)]
	lr, eps := r.lr, r.eps
	k := [2]float64{lr, eps}
	for i := adagradKernel(param, g, acc, &k); i < len(param); i++ {
		p, gi := param[i], float64(g[i])
		a := float64(acc[i]) + gi*gi
		acc[i] = float32(a)
		param[i] = float32(float64(p) - lr*gi/(math.Sqrt(a)+eps))
	}
}

// adam is TF1's ApplyAdam; state [m, v].
type adam struct {
	lr, b1, b2, eps float64
}

func newAdam(cfg Config) (Rule, error) {
	return &adam{
		lr:  cfg.LearningRate,
		b1:  cfg.Beta1,
		b2:  cfg.Beta2,
		eps: cfg.Epsilon,
	}, nil
}

func (r *adam) Name() string             { return "adam" }
func (r *adam) withRate(lr float64) Rule { c := *r; c.lr = lr; return &c }

func (r *adam) StateSlots() int { return 2 }

func (r *adam) InitState(state [][]float32) {
	checkSlots("adam", 2, state)
	clear(state[0])
	clear(state[1])
}

func (r *adam) Update(param, grad []float32, state [][]float32, step int64) {
	checkLens("adam", 2, param, grad, state)
	g := grad[:len(param)]
	m := state[0][:len(param)]
	v := state[1][:len(param)]
	t := float64(max(step, 1))
	b1, b2, eps := r.b1, r.b2, r.eps
	// b1, b2 in (0, 1) and t >= 1, so 1-b1^t > 0.
	lrt := r.lr * math.Sqrt(1-math.Pow(b2, t)) / (1 - math.Pow(b1, t))
	k := [6]float64{b1, 1 - b1, b2, 1 - b2, eps, lrt}
	for i := adamKernel(param, g, m, v, &k); i < len(param); i++ {
		p, gi := param[i], float64(g[i])
		mi := b1*float64(m[i]) + (1-b1)*gi
		vi := b2*float64(v[i]) + (1-b2)*gi*gi
		m[i] = float32(mi)
		v[i] = float32(vi)
		param[i] = float32(float64(p) - lrt*mi/(math.Sqrt(vi)+eps))
	}
}

// ftrl is FTRL-Proximal as TF's ApplyFtrl plus the paper's beta; state
// [n, z] (TF's accum and linear). At learning_rate_power -0.5 (the
// default) Update takes square roots; at any other power, updatePower
// takes powers.
type ftrl struct {
	alpha, beta, l1, l2, init float64
	shrink                    float64 // l2_shrinkage
	power                     float64 // learning_rate_power, <= 0
	frozen                    bool    // rate not positive (withRate): Update changes nothing
}

func newFTRL(cfg Config) (Rule, error) {
	return &ftrl{
		alpha: cfg.LearningRate,
		beta:  cfg.FTRLBeta,
		l1:    cfg.L1,
		l2:    cfg.L2,
		init:  cfg.InitialAccumulator,

		shrink: cfg.L2Shrinkage,
		power:  cfg.FTRLPower(),
	}, nil
}

func (r *ftrl) Name() string { return "ftrl" }

// withRate: FTRL divides by its rate, so at a rate that is not positive
// (a schedule's end at 0) the rule leaves parameters and state unchanged.
func (r *ftrl) withRate(lr float64) Rule {
	c := *r
	c.alpha, c.frozen = lr, !(lr > 0)
	return &c
}

func (r *ftrl) StateSlots() int { return 2 }

func (r *ftrl) InitState(state [][]float32) {
	checkSlots("ftrl", 2, state)
	fill(state[0], float32(r.init))
	clear(state[1])
}

func (r *ftrl) Update(param, grad []float32, state [][]float32, _ int64) {
	checkLens("ftrl", 2, param, grad, state)
	if r.frozen {
		return
	}
	if r.power != -0.5 {
		r.updatePower(param, grad, state)
		return
	}
	g := grad[:len(param)]
	n := state[0][:len(param)]
	z := state[1][:len(param)]
	invAlpha := 1 / r.alpha
	l1, beta, l2x2, shrink2 := r.l1, r.beta, 2*r.l2, 2*r.shrink
	i := 0
	if shrink2 == 0 { // the kernel has no shrinkage term (gi + 0*p is not gi at gi = -0)
		k := [5]float64{invAlpha, l1, beta, l2x2, math.Abs(l1)}
		i = ftrlKernel(param, g, n, z, &k)
	}
	for ; i < len(param); i++ {
		p, gi := param[i], float64(g[i])
		n0 := float64(n[i])
		n1 := n0 + gi*gi
		s1 := math.Sqrt(n1)
		sigma := (s1 - math.Sqrt(n0)) * invAlpha
		gz := gi // TF's grad_with_shrinkage
		if shrink2 != 0 {
			gz += shrink2 * float64(p)
		}
		zi := float64(z[i]) + gz - sigma*float64(p)
		n[i] = float32(n1)
		z[i] = float32(zi)
		if math.Abs(zi) <= l1 {
			param[i] = 0
			continue
		}
		param[i] = float32(-(zi - math.Copysign(l1, zi)) / ((beta+s1)*invAlpha + l2x2))
	}
}

// updatePower is Update at a learning_rate_power other than -0.5: TF's
// ApplyFtrl with n^-power where the fast path takes sqrt(n).
func (r *ftrl) updatePower(param, grad []float32, state [][]float32) {
	g := grad[:len(param)]
	n := state[0][:len(param)]
	z := state[1][:len(param)]
	invAlpha, q := 1/r.alpha, -r.power
	l1, beta, l2x2, shrink2 := r.l1, r.beta, 2*r.l2, 2*r.shrink
	for i, p := range param {
		gi := float64(g[i])
		n0 := float64(n[i])
		n1 := n0 + gi*gi
		s1 := math.Pow(n1, q)
		sigma := (s1 - math.Pow(n0, q)) * invAlpha
		gz := gi
		if shrink2 != 0 {
			gz += shrink2 * float64(p)
		}
		zi := float64(z[i]) + gz - sigma*float64(p)
		n[i] = float32(n1)
		z[i] = float32(zi)
		if math.Abs(zi) <= l1 {
			param[i] = 0
			continue
		}
		param[i] = float32(-(zi - math.Copysign(l1, zi)) / ((beta+s1)*invAlpha + l2x2))
	}
}

// fill sets every element of s to v.
func fill(s []float32, v float32) {
	for i := range s {
		s[i] = v
	}
}
