package optim

import (
	"math"
	"testing"
)

// TestAdamEpsilon: epsilon is added to sqrt(v) in the denominator, 1e-8 by
// default. The other tests use gradients large enough for 1e-8 to vanish in
// float32; here the gradient is of the order of epsilon, so leaving it out
// (or changing the default) halves or doubles the step.
func TestAdamEpsilon(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		g    float32
		want float64
	}{
		{
			// b1 = 0.5, b2 = 0.75, lr = 0.1, eps = 1, t = 1, g = 2:
			// m = 1, v = 1, lr_t = 0.1*sqrt(0.25)/0.5 = 0.1
			// p = 0 - 0.1*1/(1+1) = -0.05 (without eps: -0.1)
			name: "explicit",
			cfg:  Config{Name: "adam", LearningRate: 0.1, Beta1: 0.5, Beta2: 0.75, Epsilon: 1},
			g:    2,
			want: -0.05,
		},
		{
			// Same, eps = 1e-8 by default, g = 2e-8:
			// m = 1e-8, sqrt(v) = 1e-8, lr_t = 0.1
			// p = 0 - 0.1*1e-8/(1e-8+1e-8) = -0.05 (without eps: -0.1)
			name: "default",
			cfg:  Config{Name: "adam", LearningRate: 0.1, Beta1: 0.5, Beta2: 0.75},
			g:    2e-8,
			want: -0.05,
		},
	} {
		r := mustNew(t, tc.cfg)
		param := []float32{0}
		r.Update(param, []float32{tc.g}, newState(r, 1), 1)
		if !close32(param[0], tc.want) {
			t.Errorf("%s: p = %.9g, want %.9g", tc.name, param[0], tc.want)
		}
	}
}

// TestFTRLAtL1Threshold: with |z| exactly L1 the weight is held at +0, as
// the paper's w = 0, not at the -0 the closed form gives there. State is
// compared bit for bit (checkpoints, ApplyParallel, the same pushes giving
// the same bytes), so the sign of zero is part of the result.
func TestFTRLAtL1Threshold(t *testing.T) {
	r := mustNew(t, Config{Name: "ftrl", LearningRate: 1, InitialAccumulator: 9, L1: 4})
	for _, g := range []float32{4, -4} {
		// p0 = 0, so z = g - sigma*0 = g: |z| = L1.
		param := []float32{0}
		state := newState(r, 1)
		r.Update(param, []float32{g}, state, 1)
		if state[1][0] != g {
			t.Fatalf("g = %v: z = %v, want %v", g, state[1][0], g)
		}
		if math.Float32bits(param[0]) != 0 {
			t.Errorf("g = %v: p = %v (bits %#x), want +0", g, param[0], math.Float32bits(param[0]))
		}
	}
}
