package optim

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

// The tests in this file run every rule for refSteps updates of random
// gradients against two references: a float64 transcription of the rule's
// formula (below, all in float64 with nothing rounded to float32), and, for
// the rules PyTorch has, torch.optim's values in testdata/torch_golden.json
// (written by scripts/golden/torch_optim.py on the same inputs). Values must
// agree to refTol relative (to max(|want|, 1), as the parameters are of
// order 1). Each is checked dense (one slice of refRows*refDim values) and as
// sparse rows (refRows slices of refDim, each with its own state and step
// count, updated only on the steps its coin comes up), the way a sparse
// table applies a rule.

const (
	refSteps = 1000
	refRows  = 4
	refDim   = 4
	refTol   = 1e-6
)

// splitMix64 is the generator the golden script uses (Vigna's SplitMix64).
type splitMix64 struct{ s uint64 }

func (r *splitMix64) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// uniform is a float32-exact value in [-1, 1).
func (r *splitMix64) uniform() float32 { return float32(float64(r.next()>>40)/(1<<23) - 1) }

// refInputs are the initial values, then per step the gradients and which
// rows are pushed, as the golden script draws them.
func refInputs() (init []float32, grads [][]float32, pushed [][]bool) {
	r := &splitMix64{s: 27}
	init = make([]float32, refRows*refDim)
	for i := range init {
		init[i] = r.uniform()
	}
	for range refSteps {
		g := make([]float32, refRows*refDim)
		for i := range g {
			g[i] = r.uniform()
		}
		p := make([]bool, refRows)
		for i := range p {
			p[i] = r.next()>>63 == 1
		}
		grads, pushed = append(grads, g), append(pushed, p)
	}
	return init, grads, pushed
}

// runRule applies rule to a fresh copy of init over the inputs: dense, or
// row by row when rows is set.
func runRule(t testing.TB, cfg Config, rows bool) []float32 {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	init, grads, pushed := refInputs()
	p := append([]float32(nil), init...)
	n := len(p)
	if rows {
		n = refDim
	}
	type slice struct {
		lo    int
		state [][]float32
		step  int64
	}
	var slices []*slice
	for lo := 0; lo < len(p); lo += n {
		s := &slice{lo: lo, state: make([][]float32, r.StateSlots())}
		for j := range s.state {
			s.state[j] = make([]float32, n)
		}
		r.InitState(s.state)
		slices = append(slices, s)
	}
	for k, g := range grads {
		for i, s := range slices {
			if rows && !pushed[k][i] {
				continue
			}
			s.step++
			r.Update(p[s.lo:s.lo+n], g[s.lo:s.lo+n], s.state, s.step)
		}
	}
	return p
}

// refRule is a float64 transcription of one rule's formula over a slice.
type refRule func(p, g []float64, st [][]float64, t float64)

// refRules are the formulas of doc.go, one per golden case name, with the
// number of state slots and each slot's initial value.
var refRules = map[string]struct {
	cfg   Config
	init  []float64
	apply refRule
}{
	"sgd": {Config{Name: "sgd", LearningRate: 0.01}, nil, func(p, g []float64, _ [][]float64, _ float64) {
		for i := range p {
			p[i] -= 0.01 * g[i]
		}
	}},
	"momentum": {Config{Name: "momentum", LearningRate: 0.01, Momentum: 0.9}, []float64{0}, func(p, g []float64, s [][]float64, _ float64) {
		for i := range p {
			s[0][i] = 0.9*s[0][i] + g[i]
			p[i] -= 0.01 * s[0][i]
		}
	}},
	"nesterov": {Config{Name: "momentum", LearningRate: 0.01, Momentum: 0.9, Nesterov: true}, []float64{0}, func(p, g []float64, s [][]float64, _ float64) {
		for i := range p {
			s[0][i] = 0.9*s[0][i] + g[i]
			p[i] -= 0.01*g[i] + 0.01*0.9*s[0][i]
		}
	}},
	"adagrad": {Config{Name: "adagrad", LearningRate: 0.05, InitialAccumulator: 0.1}, []float64{0.1}, func(p, g []float64, s [][]float64, _ float64) {
		for i := range p {
			s[0][i] += g[i] * g[i]
			p[i] -= 0.05 * g[i] / math.Sqrt(s[0][i])
		}
	}},
	"adagrad_da": {Config{Name: "adagrad_da", LearningRate: 0.5, L1: 0.001, L2: 0.01}, []float64{0, 0.1}, func(p, g []float64, s [][]float64, t float64) {
		for i := range p {
			s[0][i] += g[i]
			s[1][i] += g[i] * g[i]
			x := math.Copysign(math.Max(math.Abs(s[0][i])-0.001*t, 0), s[0][i])
			p[i] = -0.5 * x / (0.01*t*0.5 + math.Sqrt(s[1][i]))
		}
	}},
	"adadelta": {Config{Name: "adadelta", LearningRate: 1, Rho: 0.9, Epsilon: 1e-6}, []float64{0, 0}, func(p, g []float64, s [][]float64, _ float64) {
		for i := range p {
			s[0][i] = 0.9*s[0][i] + 0.1*g[i]*g[i]
			u := math.Sqrt(s[1][i]+1e-6) / math.Sqrt(s[0][i]+1e-6) * g[i]
			s[1][i] = 0.9*s[1][i] + 0.1*u*u
			p[i] -= u
		}
	}},
	"adam": {Config{Name: "adam", LearningRate: 0.01}, []float64{0, 0}, func(p, g []float64, s [][]float64, t float64) {
		lrt := 0.01 * math.Sqrt(1-math.Pow(0.999, t)) / (1 - math.Pow(0.9, t))
		for i := range p {
			s[0][i] = 0.9*s[0][i] + 0.1*g[i]
			s[1][i] = 0.999*s[1][i] + 0.001*g[i]*g[i]
			p[i] -= lrt * s[0][i] / (math.Sqrt(s[1][i]) + 1e-8)
		}
	}},
	"adamw": {Config{Name: "adamw", LearningRate: 0.01, WeightDecay: 0.05}, []float64{0, 0}, func(p, g []float64, s [][]float64, t float64) {
		for i := range p {
			p[i] *= 1 - 0.01*0.05
			s[0][i] = 0.9*s[0][i] + 0.1*g[i]
			s[1][i] = 0.999*s[1][i] + 0.001*g[i]*g[i]
			mhat := s[0][i] / (1 - math.Pow(0.9, t))
			vhat := s[1][i] / (1 - math.Pow(0.999, t))
			p[i] -= 0.01 * mhat / (math.Sqrt(vhat) + 1e-8)
		}
	}},
	"rmsprop": {Config{Name: "rmsprop", LearningRate: 0.01, Epsilon: 1e-10}, []float64{1, 0}, func(p, g []float64, s [][]float64, _ float64) {
		for i := range p {
			s[0][i] = 0.9*s[0][i] + 0.1*g[i]*g[i]
			s[1][i] = 0.01 * g[i] / math.Sqrt(s[0][i]+1e-10)
			p[i] -= s[1][i]
		}
	}},
	"rmsprop_momentum": {Config{Name: "rmsprop", LearningRate: 0.01, Momentum: 0.5, Epsilon: 1e-10}, []float64{1, 0}, func(p, g []float64, s [][]float64, _ float64) {
		for i := range p {
			s[0][i] = 0.9*s[0][i] + 0.1*g[i]*g[i]
			s[1][i] = 0.5*s[1][i] + 0.01*g[i]/math.Sqrt(s[0][i]+1e-10)
			p[i] -= s[1][i]
		}
	}},
	"rmsprop_centered": {Config{Name: "rmsprop", LearningRate: 0.01, Momentum: 0.5, Centered: true, Epsilon: 1e-10}, []float64{1, 0, 0}, func(p, g []float64, s [][]float64, _ float64) {
		for i := range p {
			s[0][i] = 0.9*s[0][i] + 0.1*g[i]*g[i]
			s[2][i] = 0.9*s[2][i] + 0.1*g[i]
			s[1][i] = 0.5*s[1][i] + 0.01*g[i]/math.Sqrt(s[0][i]-s[2][i]*s[2][i]+1e-10)
			p[i] -= s[1][i]
		}
	}},
	"ftrl": {Config{Name: "ftrl", LearningRate: 0.5, FTRLBeta: 1, L1: 0.001, L2: 0.01, L2Shrinkage: 0.02}, []float64{0.1, 0}, func(p, g []float64, s [][]float64, _ float64) {
		for i := range p {
			n0, n1 := s[0][i], s[0][i]+g[i]*g[i]
			s[1][i] += g[i] + 2*0.02*p[i] - (math.Sqrt(n1)-math.Sqrt(n0))/0.5*p[i]
			s[0][i] = n1
			z := s[1][i]
			if math.Abs(z) <= 0.001 {
				p[i] = 0
				continue
			}
			p[i] = -(z - math.Copysign(0.001, z)) / ((1+math.Sqrt(n1))/0.5 + 2*0.01)
		}
	}},
	// learning_rate_power other than -0.5 (TF's ApplyFtrl with n^-power).
	"ftrl_power_1":   ftrlPowerRef(-1),
	"ftrl_power_0":   ftrlPowerRef(0),
	"ftrl_power_0.3": ftrlPowerRef(-0.3),
	"proximal_sgd": {Config{Name: "proximal_sgd", LearningRate: 0.01, L1: 0.01, L2: 0.1}, nil, func(p, g []float64, _ [][]float64, _ float64) {
		for i := range p {
			v := p[i] - 0.01*g[i]
			p[i] = math.Copysign(math.Max(math.Abs(v)-0.01*0.01, 0), v) / (1 + 0.01*0.1)
		}
	}},
	"proximal_adagrad": {Config{Name: "proximal_adagrad", LearningRate: 0.05, L1: 0.01, L2: 0.1}, []float64{0.1}, func(p, g []float64, s [][]float64, _ float64) {
		for i := range p {
			s[0][i] += g[i] * g[i]
			lr := 0.05 / math.Sqrt(s[0][i])
			v := p[i] - lr*g[i]
			p[i] = math.Copysign(math.Max(math.Abs(v)-lr*0.01, 0), v) / (1 + lr*0.1)
		}
	}},
	"lamb": {Config{Name: "lamb", LearningRate: 0.01, WeightDecay: 0.01}, []float64{0, 0}, func(p, g []float64, s [][]float64, t float64) {
		u := make([]float64, len(p))
		var pn, un float64
		for i := range p {
			s[0][i] = 0.9*s[0][i] + 0.1*g[i]
			s[1][i] = 0.999*s[1][i] + 0.001*g[i]*g[i]
			u[i] = s[0][i]/(1-math.Pow(0.9, t))/(math.Sqrt(s[1][i]/(1-math.Pow(0.999, t)))+1e-6) + 0.01*p[i]
			pn += p[i] * p[i]
			un += u[i] * u[i]
		}
		ratio := math.Sqrt(pn) / math.Sqrt(un)
		for i := range p {
			p[i] -= 0.01 * ratio * u[i]
		}
	}},
}

// runRef applies a reference formula as runRule applies the rule. With
// stored32 it rounds the parameters and state to float32 after each step,
// as the rules store them; without, everything stays float64.
func runRef(ref refRule, slots []float64, rows, stored32 bool) []float64 {
	init, grads, pushed := refInputs()
	p := make([]float64, len(init))
	for i, v := range init {
		p[i] = float64(v)
	}
	n := len(p)
	if rows {
		n = refDim
	}
	type slice struct {
		lo    int
		state [][]float64
		step  float64
	}
	var ss []*slice
	for lo := 0; lo < len(p); lo += n {
		s := &slice{lo: lo}
		for _, v := range slots {
			st := make([]float64, n)
			for i := range st {
				st[i] = v
			}
			s.state = append(s.state, st)
		}
		ss = append(ss, s)
	}
	g64 := make([]float64, len(p))
	for k, g := range grads {
		for i, v := range g {
			g64[i] = float64(v)
		}
		for i, s := range ss {
			if rows && !pushed[k][i] {
				continue
			}
			s.step++
			ref(p[s.lo:s.lo+n], g64[s.lo:s.lo+n], s.state, s.step)
			if stored32 {
				round32(p[s.lo : s.lo+n])
				for _, st := range s.state {
					round32(st)
				}
			}
		}
	}
	return p
}

func round32(x []float64) {
	for i, v := range x {
		x[i] = float64(float32(v))
	}
}

// closeTo reports the first index where got and want differ by more than
// tol relative to max(|want|, 1), or -1, and the worst difference.
func closeTo(got []float32, want []float64, tol float64) (int, float64) {
	worst, at := 0.0, -1
	for i := range want {
		d := math.Abs(float64(got[i])-want[i]) / math.Max(math.Abs(want[i]), 1)
		if !(d <= worst) {
			worst = d
			if d > tol || math.IsNaN(d) {
				at = i
			}
		}
	}
	return at, worst
}

// ftrlPowerRef is the "ftrl" case of refRules at learning_rate_power power:
// TF's ApplyFtrl formula with n^-power in place of sqrt(n).
func ftrlPowerRef(power float64) struct {
	cfg   Config
	init  []float64
	apply refRule
} {
	cfg := Config{Name: "ftrl", LearningRate: 0.5, FTRLBeta: 1, L1: 0.001, L2: 0.01, L2Shrinkage: 0.02, LearningRatePower: &power}
	return struct {
		cfg   Config
		init  []float64
		apply refRule
	}{cfg, []float64{0.1, 0}, func(p, g []float64, s [][]float64, _ float64) {
		for i := range p {
			n0, n1 := s[0][i], s[0][i]+g[i]*g[i]
			s[1][i] += g[i] + 2*0.02*p[i] - (math.Pow(n1, -power)-math.Pow(n0, -power))/0.5*p[i]
			s[0][i] = n1
			z := s[1][i]
			if math.Abs(z) <= 0.001 {
				p[i] = 0
				continue
			}
			p[i] = -(z - math.Copysign(0.001, z)) / ((1+math.Pow(n1, -power))/0.5 + 2*0.01)
		}
	}}
}

// TestRulesAgainstFormulas checks each rule against its formula with the
// values stored as float32 after each step, as the rules store them (to
// refTol), and against the formula all in float64 (to storageDrift: a
// float32 parameter is rounded once per step, and over refSteps steps the
// roundings add up to about sqrt(refSteps) * 2^-25 relative, so 1e-6 is
// not reachable by any float32 store).
func TestRulesAgainstFormulas(t *testing.T) {
	const storageDrift = 1e-5
	for name, c := range refRules {
		for _, rows := range []bool{false, true} {
			got := runRule(t, c.cfg, rows)
			for _, stored32 := range []bool{true, false} {
				tol := refTol
				if !stored32 {
					tol = storageDrift
				}
				want := runRef(c.apply, c.init, rows, stored32)
				if i, worst := closeTo(got, want, tol); i >= 0 {
					t.Errorf("%s (rows %v, float32 stores %v): [%d] = %v, formula gives %v (worst relative difference %.2g)", name, rows, stored32, i, got[i], want[i], worst)
				} else {
					t.Logf("%s (rows %v, float32 stores %v): worst relative difference %.2g", name, rows, stored32, worst)
				}
			}
		}
	}
}

// torchGolden is testdata/torch_golden.json.
type torchGolden struct {
	Torch string `json:"torch"`
	Rules map[string]struct {
		Config Config    `json:"config"`
		Dense  []float64 `json:"dense"`
		Rows   []float64 `json:"rows"`
	} `json:"rules"`
	Schedules map[string]struct {
		Base  float64   `json:"base"`
		Rates []float64 `json:"rates"`
	} `json:"schedules"`
}

func readGolden(t *testing.T) torchGolden {
	t.Helper()
	b, err := os.ReadFile("testdata/torch_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g torchGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestRulesAgainstTorch(t *testing.T) {
	g := readGolden(t)
	if len(g.Rules) < 10 {
		t.Fatalf("golden file has %d rules, want the 10 torch cases", len(g.Rules))
	}
	for name, c := range g.Rules {
		for _, rows := range []bool{false, true} {
			want := c.Dense
			if rows {
				want = c.Rows
			}
			got := runRule(t, c.Config, rows)
			if i, worst := closeTo(got, want, refTol); i >= 0 {
				t.Errorf("%s (rows %v): [%d] = %v, torch %s gives %v (worst relative difference %.2g)", name, rows, i, got[i], g.Torch, want[i], worst)
			} else {
				t.Logf("%s (rows %v): worst relative difference to torch %.2g", name, rows, worst)
			}
		}
	}
}
