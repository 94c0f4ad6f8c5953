package optim

import "math"

// The rules in this file complete TensorFlow 1's tf.train set: AdagradDA,
// Adadelta, RMSProp and the two proximal rules. Each follows its Apply*
// kernel (tensorflow/core/kernels/training_ops.cc).

// adagradDA is TF1's AdagradDAOptimizer (ApplyAdagradDA); state
// [gradient_accumulator, gradient_squared_accumulator], the second starting
// at InitialAccumulator (TF's initial_gradient_squared_accumulator_value,
// 0.1). t is the step (TF passes global_step + 1).
type adagradDA struct {
	lr, init, l1, l2 float64
}

func newAdagradDA(cfg Config) (Rule, error) {
	return &adagradDA{
		lr:   cfg.LearningRate,
		init: cfg.InitialAccumulator,
		l1:   cfg.L1,
		l2:   cfg.L2,
	}, nil
}

func (r *adagradDA) Name() string    { return "adagrad_da" }
func (r *adagradDA) StateSlots() int { return 2 }
func (r *adagradDA) UsesStep() bool  { return true }

func (r *adagradDA) withRate(lr float64) Rule { c := *r; c.lr = lr; return &c }

func (r *adagradDA) InitState(state [][]float32) {
	checkSlots("adagrad_da", 2, state)
	clear(state[0])
	fill(state[1], float32(r.init))
}

func (r *adagradDA) Update(param, grad []float32, state [][]float32, step int64) {
	checkLens("adagrad_da", 2, param, grad, state)
	g := grad[:len(param)]
	ga := state[0][:len(param)]
	gs := state[1][:len(param)]
	t := float64(max(step, 1))
	lr, l1t := r.lr, r.l1*t
	l2tlr := r.l2 * t * lr
	for i := range param {
		gi := float64(g[i])
		a := float64(ga[i]) + gi
		s := float64(gs[i]) + gi*gi
		ga[i] = float32(a)
		gs[i] = float32(s)
		x := a
		if r.l1 > 0 {
			x = math.Copysign(max(math.Abs(a)-l1t, 0), a)
		}
		param[i] = float32(-lr * x / (l2tlr + math.Sqrt(s)))
	}
}

// adadelta is TF1's AdadeltaOptimizer (ApplyAdadelta) and torch.optim.Adadelta;
// state [accum, accum_update], rho (0.95), epsilon (1e-8).
type adadelta struct {
	lr, rho, eps float64
}

func newAdadelta(cfg Config) (Rule, error) {
	return &adadelta{
		lr:  cfg.LearningRate,
		rho: cfg.Rho,
		eps: cfg.Epsilon,
	}, nil
}

func (r *adadelta) Name() string    { return "adadelta" }
func (r *adadelta) StateSlots() int { return 2 }
func (r *adadelta) UsesStep() bool  { return false }

func (r *adadelta) withRate(lr float64) Rule { c := *r; c.lr = lr; return &c }

func (r *adadelta) InitState(state [][]float32) {
	checkSlots("adadelta", 2, state)
	clear(state[0])
	clear(state[1])
}

func (r *adadelta) Update(param, grad []float32, state [][]float32, _ int64) {
	checkLens("adadelta", 2, param, grad, state)
	g := grad[:len(param)]
	acc := state[0][:len(param)]
	upd := state[1][:len(param)]
	lr, rho, eps := r.lr, r.rho, r.eps
	k := [4]float64{rho, 1 - rho, eps, lr}
	for i := adadeltaKernel(param, g, acc, upd, &k); i < len(param); i++ {
		p, gi := param[i], float64(g[i])
		a := rho*float64(acc[i]) + (1-rho)*gi*gi
		u := math.Sqrt(float64(upd[i])+eps) / math.Sqrt(a+eps) * gi
		acc[i] = float32(a)
		upd[i] = float32(rho*float64(upd[i]) + (1-rho)*u*u)
		param[i] = float32(float64(p) - lr*u)
	}
}

// rmsprop is TF1's RMSPropOptimizer (ApplyRMSProp, ApplyCenteredRMSProp);
// state [ms, mom] or, centered, [ms, mom, mg]. ms starts at
// InitialAccumulator (1, as TF1); rho (TF's decay, 0.9), momentum (0),
// epsilon (1e-10).
type rmsprop struct {
	lr, rho, mu, eps, init float64
	centered               bool
}

func newRMSProp(cfg Config) (Rule, error) {
	return &rmsprop{
		lr:       cfg.LearningRate,
		rho:      cfg.Rho,
		mu:       cfg.Momentum,
		eps:      cfg.Epsilon,
		init:     cfg.InitialAccumulator,
		centered: cfg.Centered,
	}, nil
}

func (r *rmsprop) Name() string { return "rmsprop" }
func (r *rmsprop) StateSlots() int {
	if r.centered {
		return 3
	}
	return 2
}
func (r *rmsprop) UsesStep() bool { return false }

func (r *rmsprop) withRate(lr float64) Rule { c := *r; c.lr = lr; return &c }

func (r *rmsprop) InitState(state [][]float32) {
	checkSlots("rmsprop", r.StateSlots(), state)
	fill(state[0], float32(r.init))
	clear(state[1])
	if r.centered {
		clear(state[2])
	}
}

func (r *rmsprop) Update(param, grad []float32, state [][]float32, _ int64) {
	checkLens("rmsprop", r.StateSlots(), param, grad, state)
	g := grad[:len(param)]
	ms := state[0][:len(param)]
	mom := state[1][:len(param)]
	lr, rho, mu, eps := r.lr, r.rho, r.mu, r.eps
	if r.centered {
		mg := state[2][:len(param)]
		for i, p := range param {
			gi := float64(g[i])
			s := rho*float64(ms[i]) + (1-rho)*gi*gi
			a := rho*float64(mg[i]) + (1-rho)*gi
			m := mu*float64(mom[i]) + lr*gi/math.Sqrt(s-a*a+eps)
			ms[i] = float32(s)
			mg[i] = float32(a)
			mom[i] = float32(m)
			param[i] = float32(float64(p) - m)
		}
		return
	}
	k := [5]float64{rho, 1 - rho, mu, lr, eps}
	for i := rmspropKernel(param, g, ms, mom, &k); i < len(param); i++ {
		p, gi := param[i], float64(g[i])
		s := rho*float64(ms[i]) + (1-rho)*gi*gi
		m := mu*float64(mom[i]) + lr*gi/math.Sqrt(s+eps)
		ms[i] = float32(s)
		mom[i] = float32(m)
		param[i] = float32(float64(p) - m)
	}
}

// prox is the proximal step of FOBOS with rate a: shrink v towards 0 by
// a*l1, then scale by 1/(1+a*l2).
func prox(v, a, l1, l2 float64) float64 {
	if l1 > 0 {
		v = math.Copysign(max(math.Abs(v)-a*l1, 0), v)
	}
	return v / (1 + a*l2)
}

// proximalSGD is TF1's ProximalGradientDescentOptimizer
// (ApplyProximalGradientDescent); no state; l1, l2 (0).
type proximalSGD struct {
	lr, l1, l2 float64
}

func newProximalSGD(cfg Config) (Rule, error) {
	return &proximalSGD{lr: cfg.LearningRate, l1: cfg.L1, l2: cfg.L2}, nil
}

func (r *proximalSGD) Name() string    { return "proximal_sgd" }
func (r *proximalSGD) StateSlots() int { return 0 }
func (r *proximalSGD) UsesStep() bool  { return false }

func (r *proximalSGD) withRate(lr float64) Rule { c := *r; c.lr = lr; return &c }

func (r *proximalSGD) InitState(state [][]float32) { checkSlots("proximal_sgd", 0, state) }

func (r *proximalSGD) Update(param, grad []float32, state [][]float32, _ int64) {
	checkLens("proximal_sgd", 0, param, grad, state)
	g := grad[:len(param)]
	lr, l1, l2 := r.lr, r.l1, r.l2
	k := [4]float64{lr, lr * l1, 1 + lr*l2, b2f(l1 > 0)}
	for i := proximalSGDKernel(param, g, &k); i < len(param); i++ {
		param[i] = float32(prox(float64(param[i])-lr*float64(g[i]), lr, l1, l2))
	}
}

// proximalAdagrad is TF1's ProximalAdagradOptimizer (ApplyProximalAdagrad);
// state [accum] starting at InitialAccumulator (0.1); l1, l2 (0).
type proximalAdagrad struct {
	lr, init, l1, l2 float64
}

func newProximalAdagrad(cfg Config) (Rule, error) {
	return &proximalAdagrad{
		lr:   cfg.LearningRate,
		init: cfg.InitialAccumulator,
		l1:   cfg.L1,
		l2:   cfg.L2,
	}, nil
}

func (r *proximalAdagrad) Name() string    { return "proximal_adagrad" }
func (r *proximalAdagrad) StateSlots() int { return 1 }
func (r *proximalAdagrad) UsesStep() bool  { return false }

func (r *proximalAdagrad) withRate(lr float64) Rule { c := *r; c.lr = lr; return &c }

func (r *proximalAdagrad) InitState(state [][]float32) {
	checkSlots("proximal_adagrad", 1, state)
	fill(state[0], float32(r.init))
}

func (r *proximalAdagrad) Update(param, grad []float32, state [][]float32, _ int64) {
	checkLens("proximal_adagrad", 1, param, grad, state)
	g := grad[:len(param)]
	acc := state[0][:len(param)]
	lr, l1, l2 := r.lr, r.l1, r.l2
	k := [4]float64{lr, l1, l2, b2f(l1 > 0)}
	for i := proximalAdagradKernel(param, g, acc, &k); i < len(param); i++ {
		p, gi := param[i], float64(g[i])
		a := float64(acc[i]) + gi*gi
		acc[i] = float32(a)
		lrt := lr / math.Sqrt(a)
		param[i] = float32(prox(float64(p)-lrt*gi, lrt, l1, l2))
	}
}
