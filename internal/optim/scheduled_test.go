package optim

import (
	"errors"
	"math"
	"testing"
)

func TestScheduledChanges(t *testing.T) {
	s, err := NewScheduled(Config{Name: "adam", LearningRate: 0.1, Schedule: "step(step_size=10,gamma=0.5)"}, []RateChange{
		{From: 100, LearningRate: 0.01},
		{From: 50, LearningRate: 1, Schedule: "exponential_lr(gamma=0.9)"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		step int64
		want float64
	}{
		{0, 0.1}, {9, 0.1}, {10, 0.05}, {49, 0.1 * math.Pow(0.5, 4)},
		{50, math.Pow(0.9, 50)}, {99, math.Pow(0.9, 99)}, // on the global step, not since 50
		{100, 0.01}, {1 << 40, 0.01},
	} {
		if got := s.Rate(c.step); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("Rate(%d) = %v, want %v", c.step, got, c.want)
		}
	}
	// A later change at the same step replaces the earlier.
	if err := s.Change(RateChange{From: 100, LearningRate: 0.02}); err != nil {
		t.Fatal(err)
	}
	if got := s.Rate(100); got != 0.02 {
		t.Errorf("after a second change at 100: Rate(100) = %v, want 0.02", got)
	}
	// At gives the rule at the step's rate, bit for bit as New would.
	want := runRuleWith(t, mustNew(t, Config{Name: "adam", LearningRate: 0.05}))
	if got := runRuleWith(t, s.At(15)); firstDiff(got, want) >= 0 {
		t.Errorf("At(15) updates as %v, adam at 0.05 as %v", got, want)
	}
	if s.Constant() {
		t.Error("Constant() with a schedule and changes")
	}
	for _, bad := range []RateChange{{From: -1, LearningRate: 1}, {From: 5, LearningRate: 0}, {From: 5, LearningRate: 1, Schedule: "nope"}} {
		if err := s.Change(bad); err == nil {
			t.Errorf("Change(%+v) accepted", bad)
		}
	}
	if err := s.Change(RateChange{From: 5, LearningRate: math.Inf(1)}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Change with an infinite rate: %v, want ErrInvalidConfig", err)
	}
}

func TestScheduledConstant(t *testing.T) {
	s, err := NewScheduled(Config{Name: "sgd", LearningRate: 0.1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Constant() || s.At(1000) != s.Rule() {
		t.Error("a rule without schedule or change: want Constant and At giving the rule itself")
	}
}

// FTRL at a scheduled rate of 0 changes nothing (it divides by the rate);
// every other rule keeps its parameters finite there.
func TestRateZero(t *testing.T) {
	for _, name := range Names() {
		r := WithRate(mustNew(t, Config{Name: name, LearningRate: 1}), 0)
		p := []float32{0.5, -0.25}
		st := newState(r, len(p))
		r.Update(p, []float32{0.1, -0.2}, st, 1)
		for _, x := range p {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Errorf("%s at rate 0: parameters %v", name, p)
				break
			}
		}
		if name == "ftrl" && (p[0] != 0.5 || p[1] != -0.25 || st[0][0] != float32(0.1)) {
			t.Errorf("ftrl at rate 0 changed its parameters or state: %v, %v", p, st)
		}
	}
}
