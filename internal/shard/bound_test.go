package shard

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
)

// Whenever a rule's bounds let an update skip its trial, the update really
// leaves every value and state finite and inside the ranges carried on: run
// over values, states and gradients from tiny to near the float32 limit.
func TestBoundHoldsTheUpdate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	mag := func() float32 {
		x := float32(math.Pow(10, rng.Float64()*78-40))
		if rng.IntN(2) == 0 {
			x = -x
		}
		if rng.IntN(8) == 0 {
			x = 0
		}
		return x
	}
	cfgs := []optim.Config{
		{Name: "sgd", LearningRate: 1}, {Name: "sgd", LearningRate: 1e-3},
		{Name: "momentum", LearningRate: 0.5, Momentum: 0.9}, {Name: "momentum", LearningRate: 0.5, Momentum: 0.9, Nesterov: true},
		{Name: "adagrad", LearningRate: 1}, {Name: "adagrad", LearningRate: 1, Epsilon: 1e-7, InitialAccumulator: 1e-30},
		{Name: "adam", LearningRate: 1}, {Name: "adam", LearningRate: 1e-3, Epsilon: 1e-30},
		{Name: "ftrl", LearningRate: 1}, {Name: "ftrl", LearningRate: 1e-3, L1: 1, L2: 1, FTRLBeta: 1e-30},
	}
	skipped := 0
	for _, cfg := range cfgs {
		rule, err := optim.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for trial := range 3000 {
			const n = 8
			v := &Var{name: "w", rule: rule, value: make([]float32, n), state: make([][]float32, rule.StateSlots()), updates: int64(trial % 5)}
			scale := float32(math.Pow(10, rng.Float64()*40-20))
			for i := range v.value {
				v.value[i] = mag() * scale / 1e20
			}
			for j := range v.state {
				v.state[j] = make([]float32, n)
			}
			rule.InitState(v.state)
			for j := range v.state {
				for i := range v.state[j] {
					if rng.IntN(2) == 0 {
						v.state[j][i] += float32(math.Abs(float64(mag())))
					}
				}
			}
			grad := make([]float32, n)
			for i := range grad {
				grad[i] = mag() * scale
			}
			var known float32 // half the trials as the data path gives it
			if m, ok := maxAbs(grad); ok && trial%2 == 0 {
				known = float32(m)
			}
			if !bounded(v, v.rule, grad, known, v.updates+1) {
				continue
			}
			skipped++
			v.updates++
			rule.Update(v.value, grad, v.state, v.updates)
			next := v.next
			rebound(v, grad)
			if !v.bnd.ok {
				t.Fatalf("%s: the bound was not carried to the update", cfg.Name)
			}
			in := func(what string, xs []float32, r optim.Range) {
				for i, x := range xs {
					if !(float64(x) >= r.Lo && float64(x) <= r.Hi) {
						t.Fatalf("%+v trial %d: %s[%d] = %v outside the bound [%v, %v]", cfg, trial, what, i, x, r.Lo, r.Hi)
					}
				}
			}
			in("value", v.value, next.param)
			for j := range v.state {
				in("state", v.state[j], next.state[j])
			}
		}
	}
	if skipped < 1000 {
		t.Fatalf("only %d updates were bounded: the bounds are too loose to help", skipped)
	}
}

// Training of ordinary magnitudes skips the trial: no push (but a few of
// ftrl's) runs the update on copies, and the values are
// bit-identical to updates applied directly.
func TestBoundSkipsTrial(t *testing.T) {
	for _, rule := range []string{"sgd", "momentum", "adagrad", "adam", "ftrl"} {
		t.Run(rule, func(t *testing.T) {
			trials := 0
			s := New(Config{NumWorkers: 1, Update: func(r optim.Rule, param, grad []float32, state [][]float32, step int64) {
				if _, ok := r.(*trialRule); ok {
					trials++
				}
				r.Update(param, grad, state, step)
			}})
			l := Layout{Vars: []VarSpec{{Name: "w", Shape: []int64{3}}}, Optimizer: optim.Config{Name: rule, LearningRate: 0.1}, NumWorkers: 1}
			if _, err := s.Init(l, [][]float32{{1, -2, 3}}); err != nil {
				t.Fatal(err)
			}
			ref, _ := optim.New(l.Optimizer)
			want := []float32{1, -2, 3}
			st := make([][]float32, ref.StateSlots())
			for j := range st {
				st[j] = make([]float32, 3)
			}
			ref.InitState(st)
			for step := range int64(200) {
				g := []float32{float32(step%7) - 3, 0.5, -1e-3 * float32(step)}
				p := pushW(0, step, g...)
				if err := s.Check(p); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Apply(p, time.Unix(0, 0), nil); err != nil {
					t.Fatal(err)
				}
				ref.Update(want, g, st, step+1)
			}
			for i, x := range s.Var("w").value {
				if math.Float32bits(x) != math.Float32bits(want[i]) {
					t.Fatalf("w[%d] = %v, want %v", i, x, want[i])
				}
			}
			// ftrl's bound couples z and the value loosely (it grows by a
			// factor each update), so its ranges are measured afresh by a
			// trial now and then.
			if want := map[string]int{"ftrl": 4}[rule]; trials > want {
				t.Fatalf("%d of 200 pushes ran the trial update, want at most %d", trials, want)
			}
		})
	}
}

// maxAbs agrees with a plain loop at every length and position, and says
// false for NaN and ±Inf.
func TestMaxAbs(t *testing.T) {
	for n := range 70 {
		g := make([]float32, n)
		for i := range g {
			g[i] = float32(i%5) - 2
		}
		for pos := range n {
			for _, x := range []float32{-7, 7, 3e38, -3e38, float32(math.Inf(-1)), float32(math.NaN())} {
				old := g[pos]
				g[pos] = x
				var want float64
				finite := true
				for _, y := range g {
					if math.IsNaN(float64(y)) || math.IsInf(float64(y), 0) {
						finite = false
					}
					want = max(want, math.Abs(float64(y)))
				}
				got, ok := maxAbs(g)
				if ok != finite || ok && got != want {
					t.Fatalf("len %d, %v at %d: maxAbs = %v, %v; want %v, %v", n, x, pos, got, ok, want, finite)
				}
				g[pos] = old
			}
		}
	}
}
