package optim

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// newState allocates r's state for n parameters and initialises it.
func newState(r Rule, n int) [][]float32 {
	state := make([][]float32, r.StateSlots())
	for i := range state {
		state[i] = make([]float32, n)
	}
	r.InitState(state)
	return state
}

func mustNew(t testing.TB, cfg Config) Rule {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return r
}

// close32 says whether got is want to float32 precision, a few roundings
// allowed: |got-want| <= 1e-6*max(1, |want|).
func close32(got float32, want float64) bool {
	return math.Abs(float64(got)-want) <= 1e-6*math.Max(1, math.Abs(want))
}

// TestHandComputed runs each rule on one coordinate for a few steps and
// checks the parameter, and where it says so the state, against values
// worked out by hand in the comments. Numbers are chosen so the square roots
// come out exact: 3-4-5, 5-12-13 and 13-84-85 triangles.
func TestHandComputed(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		p0    float32
		grads []float32
		want  []float64   // param after each step
		state [][]float64 // state after the last step, when checked
	}{
		{
			// p = 1 - 0.5*0.5 = 0.75
			// p = 0.75 - 0.5*(-1) = 1.25
			// p = 1.25 - 0.5*0.25 = 1.125
			name:  "sgd",
			cfg:   Config{Name: "sgd", LearningRate: 0.5},
			p0:    1,
			grads: []float32{0.5, -1, 0.25},
			want:  []float64{0.75, 1.25, 1.125},
		},
		{
			// mu = 0.5, lr = 0.5
			// a = 0.5*0 + 1 = 1;        p = 1 - 0.5*1 = 0.5
			// a = 0.5*1 + 1 = 1.5;      p = 0.5 - 0.5*1.5 = -0.25
			// a = 0.5*1.5 - 2 = -1.25;  p = -0.25 - 0.5*(-1.25) = 0.375
			name:  "momentum",
			cfg:   Config{Name: "momentum", LearningRate: 0.5, Momentum: 0.5},
			p0:    1,
			grads: []float32{1, 1, -2},
			want:  []float64{0.5, -0.25, 0.375},
			state: [][]float64{{-1.25}},
		},
		{
			// Nesterov: p -= lr*g + lr*mu*a, lr*mu = 0.25
			// a = 1;      p = 1 - (0.5*1 + 0.25*1) = 0.25
			// a = 1.5;    p = 0.25 - (0.5*1 + 0.25*1.5) = -0.625
			// a = -1.25;  p = -0.625 - (0.5*(-2) + 0.25*(-1.25)) = -0.625 + 1.3125 = 0.6875
			name:  "momentum nesterov",
			cfg:   Config{Name: "momentum", LearningRate: 0.5, Momentum: 0.5, Nesterov: true},
			p0:    1,
			grads: []float32{1, 1, -2},
			want:  []float64{0.25, -0.625, 0.6875},
			state: [][]float64{{-1.25}},
		},
		{
			// Default momentum 0.9, lr = 0.1
			// a = 1;              p = 1 - 0.1*1 = 0.9
			// a = 0.9*1 + 1 = 1.9; p = 0.9 - 0.1*1.9 = 0.71
			name:  "momentum default",
			cfg:   Config{Name: "momentum", LearningRate: 0.1},
			p0:    1,
			grads: []float32{1, 1},
			want:  []float64{0.9, 0.71},
			state: [][]float64{{1.9}},
		},
		{
			// acc0 = 9, lr = 0.5, eps = 0
			// acc = 9 + 16 = 25;      p = 1 - 0.5*4/5 = 0.6
			// acc = 25 + 144 = 169;   p = 0.6 - 0.5*12/13 = 0.6 - 6/13 = 0.13846154
			// acc = 169 + 7056 = 7225; p = 0.13846154 - 0.5*84/85 = 0.13846154 - 42/85 = -0.35565611
			name:  "adagrad",
			cfg:   Config{Name: "adagrad", LearningRate: 0.5, InitialAccumulator: 9},
			p0:    1,
			grads: []float32{4, 12, 84},
			want:  []float64{0.6, 0.6 - 6.0/13, 0.6 - 6.0/13 - 42.0/85},
			state: [][]float64{{7225}},
		},
		{
			// acc0 = 9, lr = 0.5, eps = 1
			// acc = 25; p = 1 - 0.5*4/(5+1) = 2/3
			name:  "adagrad epsilon",
			cfg:   Config{Name: "adagrad", LearningRate: 0.5, InitialAccumulator: 9, Epsilon: 1},
			p0:    1,
			grads: []float32{4},
			want:  []float64{2.0 / 3},
		},
		{
			// Default acc0 = 0.1, lr = 1
			// acc = 0.1 + 0.09 = 0.19 (0.1 as float32: 0.100000001490116)
			// p = 0 - 0.3/sqrt(0.19) = -0.68824720
			name:  "adagrad default",
			cfg:   Config{Name: "adagrad", LearningRate: 1},
			grads: []float32{0.3},
			want:  []float64{-0.3 / math.Sqrt(0.19)},
			state: [][]float64{{0.19}},
		},
		{
			// b1 = 0.5, b2 = 0.75, lr = 0.1, eps = 1e-8 (below float32's
			// resolution here, so left out of the sums)
			// t=1, g=2:  m = 0.5*2 = 1;  v = 0.25*4 = 1
			//            lr_t = 0.1*sqrt(1-0.75)/(1-0.5) = 0.1*0.5/0.5 = 0.1
			//            p = 1 - 0.1*1/1 = 0.9
			// t=2, g=-2: m = 0.5 - 1 = -0.5;  v = 0.75 + 1 = 1.75 = 7/4
			//            lr_t = 0.1*sqrt(1-9/16)/(1-1/4) = 0.1*(sqrt(7)/4)/(3/4) = 0.1*sqrt(7)/3
			//            p = 0.9 - (0.1*sqrt(7)/3)*(-0.5)/(sqrt(7)/2) = 0.9 + 0.1/3 = 0.93333333
			// t=3, g=1:  m = -0.25 + 0.5 = 0.25;  v = 1.3125 + 0.25 = 1.5625, sqrt 1.25
			//            lr_t = 0.1*sqrt(1-27/64)/(1-1/8) = 0.1*(sqrt(37)/8)/(7/8) = 0.1*sqrt(37)/7
			//            p = 0.93333333 - (0.1*sqrt(37)/7)*0.25/1.25 = 0.93333333 - 0.02*sqrt(37)/7
			//              = 0.93333333 - 0.01737932 = 0.91595401
			name:  "adam",
			cfg:   Config{Name: "adam", LearningRate: 0.1, Beta1: 0.5, Beta2: 0.75},
			p0:    1,
			grads: []float32{2, -2, 1},
			want:  []float64{0.9, 0.9 + 0.1/3, 0.9 + 0.1/3 - 0.02*math.Sqrt(37)/7},
			state: [][]float64{{0.25}, {1.5625}},
		},
		{
			// Defaults b1 = 0.9, b2 = 0.999, eps = 1e-8, lr = 0.001, g = 2:
			// m = 0.2, v = 0.004, lr_t = 0.001*sqrt(0.001)/0.1 = 3.1622777e-4
			// p = 1 - 3.1622777e-4*0.2/(0.063245553+1e-8) = 1 - 0.00099999984
			name:  "adam default",
			cfg:   Config{Name: "adam", LearningRate: 0.001},
			p0:    1,
			grads: []float32{2},
			want:  []float64{1 - 0.00099999984},
			state: [][]float64{{0.2}, {0.004}},
		},
		{
			// alpha = 1, beta = 1 (default), l1 = 1, l2 = 0.5 (2*l2 = 1), n0 = 9, z0 = 0
			// g=4:   sigma = (sqrt(25)-sqrt(9))/1 = 2;  z = 0 + 4 - 2*0 = 4;  n = 25
			//        p = -(4-1)/((1+5)/1 + 1) = -3/7 = -0.42857143
			// g=12:  sigma = 13-5 = 8;  z = 4 + 12 - 8*(-3/7) = 136/7;  n = 169
			//        p = -(136/7 - 1)/((1+13) + 1) = -(129/7)/15 = -43/35 = -1.22857143
			// g=-84: sigma = 85-13 = 72;  z = 136/7 - 84 - 72*(-43/35) = 836/35;  n = 7225
			//        p = -(836/35 - 1)/((1+85) + 1) = -(801/35)/87 = -267/1015 = -0.26305419
			name:  "ftrl",
			cfg:   Config{Name: "ftrl", LearningRate: 1, InitialAccumulator: 9, L1: 1, L2: 0.5},
			grads: []float32{4, 12, -84},
			want:  []float64{-3.0 / 7, -43.0 / 35, -267.0 / 1015},
			state: [][]float64{{7225}, {836.0 / 35}},
		},
		{
			// p starts at 0.5, so sigma*p counts from the first step.
			// alpha = 2, beta = 3, l1 = 1, l2 = 0.5, n0 = 9
			// g=4: sigma = (5-3)/2 = 1;  z = 4 - 1*0.5 = 3.5;  n = 25
			//      p = -(3.5-1)/((3+5)/2 + 1) = -2.5/5 = -0.5
			name:  "ftrl beta and p0",
			cfg:   Config{Name: "ftrl", LearningRate: 2, FTRLBeta: 3, InitialAccumulator: 9, L1: 1, L2: 0.5},
			p0:    0.5,
			grads: []float32{4},
			want:  []float64{-0.5},
			state: [][]float64{{25}, {3.5}},
		},
		{
			// l1 = 10 holds p at 0 while |z| <= 10:
			// g=4: z = 4, p = 0;  g=5: sigma*p = 0, z = 9, p = 0
			// g=3: z = 12, n = 9+16+25+9 = 59
			//      p = -(12-10)/((1+sqrt(59))/1 + 0) = -2/(1+7.6811457) = -0.23038053
			name:  "ftrl l1 zeroes",
			cfg:   Config{Name: "ftrl", LearningRate: 1, InitialAccumulator: 9, L1: 10},
			p0:    0,
			grads: []float32{4, 5, 3},
			want:  []float64{0, 0, -2 / (1 + math.Sqrt(59))},
			state: [][]float64{{59}, {12}},
		},
		{
			// Default n0 = 0.1 and beta = 1, alpha = 0.5, g = 1, no l1, l2:
			// sigma = (sqrt(1.1)-sqrt(0.1))/0.5; z = 1 - sigma*0 = 1; n = 1.1
			// p = -1/((1+sqrt(1.1))/0.5) = -0.5/(1+1.0488088) = -0.24404966
			name:  "ftrl default",
			cfg:   Config{Name: "ftrl", LearningRate: 0.5},
			grads: []float32{1},
			want:  []float64{-0.5 / (1 + math.Sqrt(1.1))},
			state: [][]float64{{1.1}, {1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, tt.cfg)
			param := []float32{tt.p0}
			state := newState(r, 1)
			for i, g := range tt.grads {
				r.Update(param, []float32{g}, state, int64(i+1))
				if !close32(param[0], tt.want[i]) {
					t.Errorf("step %d: p = %.9g, want %.9g", i+1, param[0], tt.want[i])
				}
			}
			for j, want := range tt.state {
				if !close32(state[j][0], want[0]) {
					t.Errorf("state[%d] = %.9g, want %.9g", j, state[j][0], want[0])
				}
			}
		})
	}
}

// TestInitState checks each rule's slots and initial values, on memory that
// was not zero, so InitState can also reset a reused sparse row.
func TestInitState(t *testing.T) {
	want := map[string][]float32{ // initial value per slot
		"sgd":      {},
		"momentum": {0},
		"adagrad":  {0.1},
		"adam":     {0, 0},
		"ftrl":     {0.1, 0},

		"adagrad_da":       {0, 0.1},
		"adadelta":         {0, 0},
		"rmsprop":          {1, 0},
		"proximal_sgd":     {},
		"proximal_adagrad": {0.1},
		"adamw":            {0, 0},
		"lamb":             {0, 0},
	}
	for _, name := range Names() {
		r := mustNew(t, Config{Name: name, LearningRate: 0.1})
		if r.Name() != name {
			t.Errorf("New(%q).Name() = %q", name, r.Name())
		}
		if r.StateSlots() != len(want[name]) {
			t.Fatalf("%s: StateSlots() = %d, want %d", name, r.StateSlots(), len(want[name]))
		}
		state := make([][]float32, r.StateSlots())
		for i := range state {
			state[i] = []float32{7, 7, 7}
		}
		r.InitState(state)
		for i, s := range state {
			for _, v := range s {
				if v != want[name][i] {
					t.Errorf("%s: state[%d] = %v after InitState, want all %v", name, i, s, want[name][i])
					break
				}
			}
		}
	}
}

// TestUpdateNoAlloc: the hot loops allocate nothing.
func TestUpdateNoAlloc(t *testing.T) {
	for _, name := range Names() {
		r := mustNew(t, Config{Name: name, LearningRate: 0.1})
		param, grad := make([]float32, 1000), make([]float32, 1000)
		state := newState(r, len(param))
		step := int64(0)
		allocs := testing.AllocsPerRun(10, func() {
			step++
			r.Update(param, grad, state, step)
		})
		if allocs != 0 {
			t.Errorf("%s: Update allocates %v times per call, want 0", name, allocs)
		}
	}
}

// TestUpdateLengthMismatch: a caller bug panics with a message that names
// the rule and the lengths.
func TestUpdateLengthMismatch(t *testing.T) {
	for _, name := range Names() {
		r := mustNew(t, Config{Name: name, LearningRate: 0.1})
		state := newState(r, 4)
		for _, tc := range []struct {
			what  string
			grad  []float32
			state [][]float32
			msg   string
		}{
			{"short grad", make([]float32, 3), state, "len(grad) = 3, want len(param) = 4"},
			{"missing slot", make([]float32, 4), append(state, make([]float32, 4)), "want StateSlots()"},
		} {
			func() {
				defer func() {
					msg, _ := recover().(string)
					if !strings.Contains(msg, name) || !strings.Contains(msg, tc.msg) {
						t.Errorf("%s, %s: panic %q, want one naming %q and saying %q", name, tc.what, msg, name, tc.msg)
					}
				}()
				r.Update(make([]float32, 4), tc.grad, tc.state, 1)
			}()
		}
	}
}

// TestAdamStepBelowOne: a step < 1 counts as 1 rather than dividing by zero.
func TestAdamStepBelowOne(t *testing.T) {
	r := mustNew(t, Config{Name: "adam", LearningRate: 0.1})
	for _, step := range []int64{0, -5} {
		p0, p1 := []float32{1}, []float32{1}
		r.Update(p0, []float32{2}, newState(r, 1), step)
		r.Update(p1, []float32{2}, newState(r, 1), 1)
		if p0[0] != p1[0] {
			t.Errorf("step %d: p = %v, want %v as for step 1", step, p0[0], p1[0])
		}
	}
}

// randSlice returns n values uniform in [-scale, scale), and about a fraction
// zero of them exactly 0 (a feature absent from the batch).
func randSlice(rng *rand.Rand, n int, scale, zero float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		if rng.Float64() < zero {
			continue
		}
		s[i] = float32(scale * (2*rng.Float64() - 1))
	}
	return s
}
