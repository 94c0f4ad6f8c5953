package optim

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// ftrlRef is one coordinate of Algorithm 1 of McMahan et al. 2013, "Ad Click
// Prediction: a View from the Trenches", in float64 and in the paper's order:
// the weight is computed lazily from (z, n) when a prediction needs it, then
// the gradient observed at that weight updates z and n. lambda2 is the
// paper's, so it is 2*Config.L2.
type ftrlRef struct {
	alpha, beta, lambda1, lambda2 float64
	z, n                          float64
}

// w is the paper's per-coordinate weight for the current (z, n).
func (f *ftrlRef) w() float64 {
	if math.Abs(f.z) <= f.lambda1 {
		return 0
	}
	sgn := 1.0
	if f.z < 0 {
		sgn = -1
	}
	return -(f.z - sgn*f.lambda1) / ((f.beta+math.Sqrt(f.n))/f.alpha + f.lambda2)
}

// observe folds in gradient g, taken at the weight w() gives now.
func (f *ftrlRef) observe(g float64) {
	w := f.w()
	sigma := (math.Sqrt(f.n+g*g) - math.Sqrt(f.n)) / f.alpha
	f.z += g - sigma*w
	f.n += g * g
}

// TestFTRLAgainstPaper runs the float32 rule and the float64 reference side
// by side on random, partly sparse gradients and compares the weights and
// the state after every step. The rule computes p eagerly after each update;
// the reference lazily before each; they must agree.
func TestFTRLAgainstPaper(t *testing.T) {
	configs := []Config{
		{Name: "ftrl", LearningRate: 0.1},
		{Name: "ftrl", LearningRate: 0.05, L1: 0.5, L2: 0.1},
		{Name: "ftrl", LearningRate: 1, FTRLBeta: 0.25, L1: 2, L2: 3, InitialAccumulator: 1},
		{Name: "ftrl", LearningRate: 0.01, L1: 1e-3},
	}
	const n, steps = 500, 100
	for ci, cfg := range configs {
		r := mustNew(t, cfg)
		rng := rand.New(rand.NewPCG(1, uint64(ci)))
		param := make([]float32, n) // the paper starts at w = 0
		state := newState(r, n)
		ref := make([]ftrlRef, n)
		for i := range ref {
			ref[i] = ftrlRef{
				alpha: cfg.LearningRate, beta: orDefault(cfg.FTRLBeta, 1),
				lambda1: cfg.L1, lambda2: 2 * cfg.L2,
				n: float64(float32(orDefault(cfg.InitialAccumulator, 0.1))),
			}
		}
		var worst float64
		for step := 1; step <= steps; step++ {
			// Magnitudes spread over four decades, 30% absent.
			grad := randSlice(rng, n, 1, 0.3)
			for i := range grad {
				grad[i] *= float32(math.Pow(10, -3*rng.Float64()))
			}
			r.Update(param, grad, state, int64(step))
			for i := range ref {
				ref[i].observe(float64(grad[i]))
				w := ref[i].w()
				// Near |z| = l1 the two may fall either side of the
				// threshold, but there w is near 0 anyway, so an
				// absolute floor covers it.
				d := math.Abs(float64(param[i]) - w)
				worst = max(worst, d/(1+math.Abs(w)))
				if d > 1e-6*(1+math.Abs(w)) {
					t.Fatalf("config %d step %d coord %d: p = %.9g, paper's w = %.9g", ci, step, i, param[i], w)
				}
				if !close32(state[0][i], ref[i].n) {
					t.Fatalf("config %d step %d coord %d: n = %.9g, paper's n = %.9g", ci, step, i, state[0][i], ref[i].n)
				}
				if math.Abs(float64(state[1][i])-ref[i].z) > 1e-6*(1+math.Abs(ref[i].z)) {
					t.Fatalf("config %d step %d coord %d: z = %.9g, paper's z = %.9g", ci, step, i, state[1][i], ref[i].z)
				}
			}
		}
		t.Logf("config %d: worst |p-w|/(1+|w|) = %.3g", ci, worst)
	}
}

// TestFTRLPowerDefault checks that learning_rate_power -0.5, given or by
// default, keeps FTRL's square-root path bit for bit, and that the general
// power path at -0.5 agrees with it to float rounding.
func TestFTRLPowerDefault(t *testing.T) {
	half := -0.5
	base := Config{Name: "ftrl", LearningRate: 0.5, L1: 0.001, L2: 0.01, L2Shrinkage: 0.02}
	given := base
	given.LearningRatePower = &half
	for _, rows := range []bool{false, true} {
		want := runRule(t, base, rows)
		got := runRule(t, given, rows)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("rows %v: [%d] = %v with learning_rate_power -0.5 given, %v by default", rows, i, got[i], want[i])
			}
		}
	}
	r, err := New(base)
	if err != nil {
		t.Fatal(err)
	}
	fast := r.(*ftrl)
	init, grads, _ := refInputs()
	pa, pb := append([]float32(nil), init...), append([]float32(nil), init...)
	sa := [][]float32{make([]float32, len(pa)), make([]float32, len(pa))}
	sb := [][]float32{make([]float32, len(pa)), make([]float32, len(pa))}
	fast.InitState(sa)
	fast.InitState(sb)
	for k, g := range grads {
		fast.Update(pa, g, sa, int64(k+1))
		fast.updatePower(pb, g, sb)
	}
	want64 := make([]float64, len(pa))
	for i, v := range pa {
		want64[i] = float64(v)
	}
	if i, worst := closeTo(pb, want64, 1e-5); i >= 0 {
		t.Errorf("[%d]: power path %v, square-root path %v (worst relative difference %.2g)", i, pb[i], pa[i], worst)
	}
}

// TestFTRLPowerChecked checks that learning_rate_power is refused above 0
// and when not finite, and that 0 (a fixed rate) is a power of its own.
func TestFTRLPowerChecked(t *testing.T) {
	for _, p := range []float64{0.1, math.Inf(-1), math.NaN()} {
		if _, err := New(Config{Name: "ftrl", LearningRate: 0.1, LearningRatePower: &p}); err == nil || !strings.Contains(err.Error(), "learning_rate_power") {
			t.Errorf("learning_rate_power %v: err %v, want one naming learning_rate_power", p, err)
		}
	}
	zero := 0.0
	a := runRule(t, Config{Name: "ftrl", LearningRate: 0.5, LearningRatePower: &zero}, false)
	b := runRule(t, Config{Name: "ftrl", LearningRate: 0.5}, false)
	if reflect.DeepEqual(a, b) {
		t.Errorf("learning_rate_power 0 gives the values of the default -0.5")
	}
	if got := Resolved(Config{Name: "ftrl", LearningRate: 0.1}).FTRLPower(); got != -0.5 {
		t.Errorf("Resolved: learning_rate_power %v, want -0.5", got)
	}
}
