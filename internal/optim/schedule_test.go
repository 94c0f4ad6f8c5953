package optim

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestScheduleAgainstTorch(t *testing.T) {
	g := readGolden(t)
	if len(g.Schedules) != 4 {
		t.Fatalf("golden file has %d schedules, want StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR", len(g.Schedules))
	}
	for text, c := range g.Schedules {
		s, err := ParseSchedule(text)
		if err != nil {
			t.Fatal(err)
		}
		for step, want := range c.Rates {
			if got := s.Rate(c.Base, int64(step)); math.Abs(got-want) > 1e-6*math.Abs(want) {
				t.Errorf("%s at step %d: %v, torch %v", text, step, got, want)
				break
			}
		}
	}
}

// TestScheduleFormulas checks each kind against TF1's documented formula
// (tf.compat.v1.train.*_decay) at a few steps.
func TestScheduleFormulas(t *testing.T) {
	const lr = 0.1
	for _, c := range []struct {
		text string
		step int64
		want float64
	}{
		{"", 12345, lr},
		{"constant", 7, lr},
		{"exponential(decay_steps=100,decay_rate=0.5)", 150, lr * math.Pow(0.5, 1.5)},
		{"exponential(decay_steps=100,decay_rate=0.5,staircase)", 150, lr * 0.5},
		{"exponential(decay_steps=100, decay_rate=0.5, staircase=false)", 150, lr * math.Pow(0.5, 1.5)},
		{"inverse_time(decay_steps=10,decay_rate=0.5)", 25, lr / (1 + 0.5*2.5)},
		{"inverse_time(decay_steps=10,decay_rate=0.5,staircase)", 25, lr / (1 + 0.5*2)},
		{"natural_exp(decay_steps=10,decay_rate=0.5)", 25, lr * math.Exp(-0.5*2.5)},
		{"natural_exp(decay_steps=10,decay_rate=0.5,staircase)", 25, lr * math.Exp(-0.5*2)},
		{"polynomial(decay_steps=100)", 50, (lr-0.0001)*0.5 + 0.0001},
		{"polynomial(decay_steps=100,end_learning_rate=0.01,power=2)", 50, (lr-0.01)*0.25 + 0.01},
		{"polynomial(decay_steps=100,end_learning_rate=0.01)", 500, 0.01},
		// cycle: decay_steps becomes 100*ceil(150/100) = 200.
		{"polynomial(decay_steps=100,end_learning_rate=0.01,cycle)", 150, (lr-0.01)*0.25 + 0.01},
		{"polynomial(decay_steps=100,end_learning_rate=0.01,cycle)", 0, lr},
		{"piecewise_constant(boundaries=100:200,values=1:0.5:0.25)", 100, 1},
		{"piecewise_constant(boundaries=100:200,values=1:0.5:0.25)", 101, 0.5},
		{"piecewise_constant(boundaries=100:200,values=1:0.5:0.25)", 200, 0.5},
		{"piecewise_constant(boundaries=100:200,values=1:0.5:0.25)", 201, 0.25},
		{"cosine(decay_steps=100)", 50, lr * 0.5},
		{"cosine(decay_steps=100,alpha=0.1)", 100, lr * 0.1},
		{"cosine(decay_steps=100,alpha=0.1)", 1000, lr * 0.1},
		{"step(step_size=30)", 59, lr * 0.1},
		{"step(step_size=30,gamma=0.5)", 60, lr * 0.25},
		{"multistep(milestones=10:20)", 10, lr * 0.1},
		{"multistep(milestones=10:20)", 25, lr * 0.01},
		{"exponential_lr(gamma=0.9)", 3, lr * 0.729},
		{"cosine_annealing(t_max=100,eta_min=0.01)", 100, 0.01},
		// Warm-up: linear from (1/N) up to the schedule's rate at step 100.
		{"warmup(steps=100)+step(step_size=30)", 0, lr * 0.001 * 0.01},
		{"warmup(steps=100)+step(step_size=30)", 49, lr * 0.001 * 0.5},
		{"warmup(steps=100,start=0.5)+constant", 49, lr * 0.75},
		{"warmup(steps=100)+step(step_size=30)", 100, lr * 0.001},
		{"warmup(steps=10)", 4, lr * 0.5},
	} {
		s, err := ParseSchedule(c.text)
		if err != nil {
			t.Errorf("%q: %v", c.text, err)
			continue
		}
		if got := s.Rate(lr, c.step); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%q at step %d: %v, want %v", c.text, c.step, got, c.want)
		}
	}
}

func TestScheduleErrors(t *testing.T) {
	for text, want := range map[string]string{
		"linear":                      "unknown kind",
		"exponential(decay_rate=0.5)": "missing decay_steps",
		"exponential(decay_steps=0,decay_rate=1)":                   "decay_steps = 0, want > 0",
		"exponential(decay_steps=10,decay_rate=0.5,gamma=2)":        "unknown argument \"gamma\"",
		"exponential(decay_steps=10,decay_steps=10,decay_rate=0.5)": "given twice",
		"step(step_size=x)":   "want a finite number",
		"step(step_size=-3)":  "want a finite number >= 0",
		"step(step_size=NaN)": "want a finite number",
		"step(step_size=10":   "closing parenthesis",
		"exponential(decay_steps=10,decay_rate=1,staircase=maybe)": "want true or false",
		"piecewise_constant(boundaries=10:20,values=1:2)":          "2 boundaries need 3 values",
		"piecewise_constant(boundaries=20:10,values=1:2:3)":        "must increase",
		"multistep(milestones=5:5)":                                "must increase",
		"warmup(steps=0)+constant":                                 "want a whole number >= 1",
		"warmup(steps=1.5)+constant":                               "want a whole number >= 1",
		"warmup(steps=10,start=2)+constant":                        "want in [0, 1]",
		"warmup(steps=10)constant":                                 "want warmup(steps=N[,start=F])+KIND",
	} {
		_, err := ParseSchedule(text)
		if !errors.Is(err, ErrSchedule) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSchedule(%q) = %v, want ErrSchedule saying %q", text, err, want)
		}
	}
	// New refuses a rule whose schedule does not parse.
	if _, err := New(Config{Name: "sgd", LearningRate: 0.1, Schedule: "cosine()"}); !errors.Is(err, ErrSchedule) {
		t.Errorf("New with a bad schedule: %v, want ErrSchedule", err)
	}
}

// TestWithRate: a rule with its rate set by WithRate updates bit for bit as
// one built with that rate, for every rule, and leaves the original as it
// was.
func TestWithRate(t *testing.T) {
	for _, name := range Names() {
		cfg := Config{Name: name, LearningRate: 0.5, L1: 0.01, L2: 0.01}
		r := mustNew(t, cfg)
		cfg.LearningRate = 0.125
		want := runRuleWith(t, mustNew(t, cfg))
		if got := runRuleWith(t, WithRate(r, 0.125)); firstDiff(got, want) >= 0 {
			t.Errorf("%s: WithRate(0.125) gives %v, New with 0.125 gives %v", name, got, want)
		}
		cfg.LearningRate = 0.5
		if got, want := runRuleWith(t, r), runRuleWith(t, mustNew(t, cfg)); firstDiff(got, want) >= 0 {
			t.Errorf("%s: WithRate changed the rule it was given", name)
		}
	}
}

func runRuleWith(t *testing.T, r Rule) []float32 {
	t.Helper()
	p := []float32{0.5, -0.25, 1, 2}
	st := newState(r, len(p))
	for step := int64(1); step <= 3; step++ {
		r.Update(p, []float32{0.1, -0.2, 0.3, 0}, st, step)
	}
	return p
}

func TestPerCoordinate(t *testing.T) {
	for _, name := range Names() {
		if got, want := PerCoordinate(mustNew(t, Config{Name: name, LearningRate: 1})), name != "lamb"; got != want {
			t.Errorf("PerCoordinate(%s) = %v, want %v", name, got, want)
		}
	}
}
