package optim

import "math"

// adamW is torch.optim.AdamW (Loshchilov and Hutter, "Decoupled Weight
// Decay Regularization"); state [m, v], beta1 (0.9), beta2 (0.999),
// epsilon (1e-8, added to sqrt of the bias-corrected v, as torch), weight
// decay (0.01, multiplied by the learning rate, as torch).
type adamW struct {
	lr, b1, b2, eps, wd float64
}

func newAdamW(cfg Config) (Rule, error) {
	return &adamW{
		lr:  cfg.LearningRate,
		b1:  cfg.Beta1,
		b2:  cfg.Beta2,
		eps: cfg.Epsilon,
		wd:  cfg.WeightDecay,
	}, nil
}

func (r *adamW) Name() string    { return "adamw" }
func (r *adamW) StateSlots() int { return 2 }
func (r *adamW) UsesStep() bool  { return true }

func (r *adamW) withRate(lr float64) Rule { c := *r; c.lr = lr; return &c }

func (r *adamW) InitState(state [][]float32) {
	checkSlots("adamw", 2, state)
	clear(state[0])
	clear(state[1])
}

func (r *adamW) Update(param, grad []float32, state [][]float32, step int64) {
	checkLens("adamw", 2, param, grad, state)
	g := grad[:len(param)]
	m := state[0][:len(param)]
	v := state[1][:len(param)]
	t := float64(max(step, 1))
	b1, b2, eps := r.b1, r.b2, r.eps
	decay := 1 - r.lr*r.wd
	stepSize := r.lr / (1 - math.Pow(b1, t))
	invSqrtBC2 := 1 / math.Sqrt(1-math.Pow(b2, t))
	k := [8]float64{b1, 1 - b1, b2, 1 - b2, eps, stepSize, decay, invSqrtBC2}
	for i := adamWKernel(param, g, m, v, &k); i < len(param); i++ {
		p, gi := param[i], float64(g[i])
		mi := b1*float64(m[i]) + (1-b1)*gi
		vi := b2*float64(v[i]) + (1-b2)*gi*gi
		m[i] = float32(mi)
		v[i] = float32(vi)
		param[i] = float32(float64(p)*decay - stepSize*mi/(math.Sqrt(vi)*invSqrtBC2+eps))
	}
}

// lamb is LAMB (You et al. 2019, "Large Batch Optimization for Deep
// Learning: Training BERT in 76 minutes"), as tfa.optimizers.LAMB; state
// [m, v], beta1 (0.9), beta2 (0.999), epsilon (1e-6), weight decay (0).
// The trust ratio ||p|| / ||update|| is taken over the slice Update is
// given, so lamb is not per-coordinate: a dense variable must be updated in
// one call (ApplyParallel and the ps do so) and a sparse table's row is its
// own slice.
type lamb struct {
	lr, b1, b2, eps, wd float64
}

func newLAMB(cfg Config) (Rule, error) {
	return &lamb{
		lr:  cfg.LearningRate,
		b1:  cfg.Beta1,
		b2:  cfg.Beta2,
		eps: cfg.Epsilon,
		wd:  cfg.WeightDecay,
	}, nil
}

func (r *lamb) Name() string        { return "lamb" }
func (r *lamb) StateSlots() int     { return 2 }
func (r *lamb) UsesStep() bool      { return true }
func (r *lamb) PerCoordinate() bool { return false }

func (r *lamb) withRate(lr float64) Rule { c := *r; c.lr = lr; return &c }

func (r *lamb) InitState(state [][]float32) {
	checkSlots("lamb", 2, state)
	clear(state[0])
	clear(state[1])
}

func (r *lamb) Update(param, grad []float32, state [][]float32, step int64) {
	checkLens("lamb", 2, param, grad, state)
	g := grad[:len(param)]
	m := state[0][:len(param)]
	v := state[1][:len(param)]
	t := float64(max(step, 1))
	b1, b2, eps, wd := r.b1, r.b2, r.eps, r.wd
	bc1 := 1 / (1 - math.Pow(b1, t))
	bc2 := 1 / (1 - math.Pow(b2, t))
	// The first pass stores m and v and sums the squares of p and of the
	// update; the second recomputes the update from the stored m and v
	// (so both passes see the same values) and applies it.
	var pp, uu float64
	for i, p := range param {
		gi := float64(g[i])
		m[i] = float32(b1*float64(m[i]) + (1-b1)*gi)
		v[i] = float32(b2*float64(v[i]) + (1-b2)*gi*gi)
		u := float64(m[i])*bc1/(math.Sqrt(float64(v[i])*bc2)+eps) + wd*float64(p)
		pp += float64(p) * float64(p)
		uu += u * u
	}
	ratio := 1.0
	if pp > 0 && uu > 0 {
		ratio = math.Sqrt(pp) / math.Sqrt(uu)
	}
	k := r.lr * ratio
	for i, p := range param {
		u := float64(m[i])*bc1/(math.Sqrt(float64(v[i])*bc2)+eps) + wd*float64(p)
		param[i] = float32(float64(p) - k*u)
	}
}
