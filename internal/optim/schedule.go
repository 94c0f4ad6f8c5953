package optim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrSchedule is returned, wrapped, by ParseSchedule for text that is not a
// schedule.
var ErrSchedule = errors.New("optim: invalid learning-rate schedule")

// Schedule is a learning-rate schedule: a pure function of the base rate and
// the global step, as TF1's tf.train.*_decay(learning_rate, global_step, ...)
// and torch.optim.lr_scheduler's closed forms. The zero value is the
// constant schedule. Read one from text with ParseSchedule; the syntax is
//
//	[warmup(steps=N[,start=F])+]KIND[(NAME=VALUE,...)]
//
// with these kinds (defaults in brackets; lists separated by ':'; a bare
// flag name such as staircase means NAME=true):
//
//	constant
//	exponential(decay_steps, decay_rate[, staircase])     TF exponential_decay
//	inverse_time(decay_steps, decay_rate[, staircase])    TF inverse_time_decay
//	natural_exp(decay_steps, decay_rate[, staircase])     TF natural_exp_decay
//	polynomial(decay_steps[, end_learning_rate=0.0001, power=1, cycle])
//	                                                      TF polynomial_decay
//	piecewise_constant(boundaries=B1:B2..., values=V0:V1:V2...)
//	                                                      TF piecewise_constant
//	cosine(decay_steps[, alpha=0])                        TF cosine_decay
//	step(step_size[, gamma=0.1])                          torch StepLR
//	multistep(milestones=M1:M2...[, gamma=0.1])           torch MultiStepLR
//	exponential_lr(gamma)                                 torch ExponentialLR
//	cosine_annealing(t_max[, eta_min=0])                  torch CosineAnnealingLR
//
// Steps are global steps, where torch's schedulers count calls of step()
// (often epochs). piecewise_constant's values are rates, not factors of the
// base rate, as in TF. A warm-up of N steps comes before any kind: at step
// s < N the rate is KIND's rate at step N times start + (1-start)*(s+1)/N
// (start 0 by default), so it rises linearly from the first step (never 0)
// to meet the schedule at N; warmup(steps=N) alone warms up to the constant
// rate.
type Schedule struct {
	kind      string
	decay     float64 // decay_steps, step_size, t_max
	rate      float64 // decay_rate, gamma
	end       float64 // end_learning_rate, alpha, eta_min
	power     float64
	stair     bool // staircase, cycle
	marks     []float64
	values    []float64
	warmup    int64
	warmStart float64
}

// scheduleKind says which arguments a kind takes and their defaults (NaN:
// required).
type scheduleKind struct {
	args map[string]float64
	// set stores the arguments, already checked present and numeric.
	set func(s *Schedule, a map[string]float64, lists map[string][]float64) error
}

var nan = math.NaN()

func decayArgs(s *Schedule, a map[string]float64, _ map[string][]float64) error {
	s.decay, s.rate, s.stair = a["decay_steps"], a["decay_rate"], a["staircase"] != 0
	return positive("decay_steps", s.decay)
}

var scheduleKinds = map[string]scheduleKind{
	"constant":     {args: map[string]float64{}, set: func(*Schedule, map[string]float64, map[string][]float64) error { return nil }},
	"exponential":  {args: map[string]float64{"decay_steps": nan, "decay_rate": nan, "staircase": 0}, set: decayArgs},
	"inverse_time": {args: map[string]float64{"decay_steps": nan, "decay_rate": nan, "staircase": 0}, set: decayArgs},
	"natural_exp":  {args: map[string]float64{"decay_steps": nan, "decay_rate": nan, "staircase": 0}, set: decayArgs},
	"polynomial": {args: map[string]float64{"decay_steps": nan, "end_learning_rate": 0.0001, "power": 1, "cycle": 0},
		set: func(s *Schedule, a map[string]float64, _ map[string][]float64) error {
			s.decay, s.end, s.power, s.stair = a["decay_steps"], a["end_learning_rate"], a["power"], a["cycle"] != 0
			return positive("decay_steps", s.decay)
		}},
	"piecewise_constant": {args: map[string]float64{"boundaries": nan, "values": nan},
		set: func(s *Schedule, _ map[string]float64, l map[string][]float64) error {
			s.marks, s.values = l["boundaries"], l["values"]
			if len(s.values) != len(s.marks)+1 {
				return fmt.Errorf("%d boundaries need %d values, got %d", len(s.marks), len(s.marks)+1, len(s.values))
			}
			return increasing("boundaries", s.marks)
		}},
	"cosine": {args: map[string]float64{"decay_steps": nan, "alpha": 0},
		set: func(s *Schedule, a map[string]float64, _ map[string][]float64) error {
			s.decay, s.end = a["decay_steps"], a["alpha"]
			return positive("decay_steps", s.decay)
		}},
	"step": {args: map[string]float64{"step_size": nan, "gamma": 0.1},
		set: func(s *Schedule, a map[string]float64, _ map[string][]float64) error {
			s.decay, s.rate = a["step_size"], a["gamma"]
			return positive("step_size", s.decay)
		}},
	"multistep": {args: map[string]float64{"milestones": nan, "gamma": 0.1},
		set: func(s *Schedule, a map[string]float64, l map[string][]float64) error {
			s.marks, s.rate = l["milestones"], a["gamma"]
			return increasing("milestones", s.marks)
		}},
	"exponential_lr": {args: map[string]float64{"gamma": nan},
		set: func(s *Schedule, a map[string]float64, _ map[string][]float64) error {
			s.rate = a["gamma"]
			return nil
		}},
	"cosine_annealing": {args: map[string]float64{"t_max": nan, "eta_min": 0},
		set: func(s *Schedule, a map[string]float64, _ map[string][]float64) error {
			s.decay, s.end = a["t_max"], a["eta_min"]
			return positive("t_max", s.decay)
		}},
}

// listArgs are the arguments that take a ':'-separated list.
var listArgs = map[string]bool{"boundaries": true, "values": true, "milestones": true}

// flagArgs are the arguments that may be given bare, meaning true.
var flagArgs = map[string]bool{"staircase": true, "cycle": true}

func positive(name string, v float64) error {
	if !(v > 0) {
		return fmt.Errorf("%s = %v, want > 0", name, v)
	}
	return nil
}

func increasing(name string, v []float64) error {
	for i := 1; i < len(v); i++ {
		if !(v[i] > v[i-1]) {
			return fmt.Errorf("%s must increase, got %v after %v", name, v[i], v[i-1])
		}
	}
	return nil
}

// ScheduleKinds lists the kinds ParseSchedule knows, sorted.
func ScheduleKinds() []string {
	k := make([]string, 0, len(scheduleKinds))
	for n := range scheduleKinds {
		k = append(k, n)
	}
	slices.Sort(k)
	return k
}

// ParseSchedule reads a schedule in the syntax Schedule describes; "" is
// the constant schedule. Errors wrap ErrSchedule and say which part is
// wrong and what was expected.
func ParseSchedule(text string) (Schedule, error) {
	t := strings.ReplaceAll(text, " ", "")
	if t == "" {
		return Schedule{}, nil
	}
	fail := func(format string, a ...any) (Schedule, error) {
		return Schedule{}, fmt.Errorf("%w %q: %s", ErrSchedule, text, fmt.Sprintf(format, a...))
	}
	var s Schedule
	if rest, ok := strings.CutPrefix(t, "warmup("); ok {
		w, after, ok := strings.Cut(rest, ")+")
		if !ok {
			if w, ok = strings.CutSuffix(rest, ")"); !ok || strings.Contains(w, ")") {
				return fail("want warmup(steps=N[,start=F])+KIND")
			}
			after = "constant"
		}
		args, _, err := parseArgs(w, map[string]float64{"steps": nan, "start": 0})
		if err != nil {
			return fail("warmup: %v", err)
		}
		if n := args["steps"]; n != math.Trunc(n) || n < 1 || n > 1<<53 {
			return fail("warmup: steps = %v, want a whole number >= 1", n)
		}
		if st := args["start"]; !(st >= 0 && st <= 1) {
			return fail("warmup: start = %v, want in [0, 1]", st)
		}
		s.warmup, s.warmStart = int64(args["steps"]), args["start"]
		t = after
	}
	name, argText := t, ""
	if i := strings.IndexByte(t, '('); i >= 0 {
		if !strings.HasSuffix(t, ")") {
			return fail("want KIND(NAME=VALUE,...) with a closing parenthesis")
		}
		name, argText = t[:i], t[i+1:len(t)-1]
	}
	kind, ok := scheduleKinds[name]
	if !ok {
		return fail("unknown kind %q (want one of %s)", name, strings.Join(ScheduleKinds(), ", "))
	}
	args, lists, err := parseArgs(argText, kind.args)
	if err != nil {
		return fail("%s: %v", name, err)
	}
	s.kind = name
	if err := kind.set(&s, args, lists); err != nil {
		return fail("%s: %v", name, err)
	}
	if name == "constant" {
		s.kind = ""
	}
	return s, nil
}

// parseArgs reads NAME=VALUE pairs separated by commas against want (the
// names allowed, each with its default; NaN: required).
func parseArgs(text string, want map[string]float64) (map[string]float64, map[string][]float64, error) {
	args := make(map[string]float64, len(want))
	lists := map[string][]float64{}
	if text != "" {
		for _, kv := range strings.Split(text, ",") {
			k, v, hasValue := strings.Cut(kv, "=")
			if _, ok := want[k]; !ok {
				names := make([]string, 0, len(want))
				for n := range want {
					names = append(names, n)
				}
				slices.Sort(names)
				return nil, nil, fmt.Errorf("unknown argument %q (want %s)", k, strings.Join(names, ", "))
			}
			if _, dup := args[k]; dup {
				return nil, nil, fmt.Errorf("%s given twice", k)
			}
			switch {
			case !hasValue && flagArgs[k]:
				args[k] = 1
			case flagArgs[k]:
				b, err := strconv.ParseBool(v)
				if err != nil {
					return nil, nil, fmt.Errorf("%s = %q, want true or false", k, v)
				}
				args[k] = 0
				if b {
					args[k] = 1
				}
			case listArgs[k]:
				var l []float64
				for _, e := range strings.Split(v, ":") {
					f, err := number(k, e)
					if err != nil {
						return nil, nil, err
					}
					l = append(l, f)
				}
				lists[k], args[k] = l, 0
			default:
				f, err := number(k, v)
				if err != nil {
					return nil, nil, err
				}
				args[k] = f
			}
		}
	}
	for k, def := range want {
		if _, ok := args[k]; ok {
			continue
		}
		if math.IsNaN(def) {
			return nil, nil, fmt.Errorf("missing %s", k)
		}
		args[k] = def
	}
	return args, lists, nil
}

func number(name, v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, fmt.Errorf("%s = %q, want a finite number >= 0", name, v)
	}
	return f, nil
}

// Constant says whether the schedule always gives the base rate.
func (s Schedule) Constant() bool { return s.kind == "" && s.warmup == 0 }

// Rate is the learning rate at global step step (0-based: the step whose
// update is being applied) for base rate base.
func (s Schedule) Rate(base float64, step int64) float64 {
	step = max(step, 0)
	if step < s.warmup {
		at := s.rate0(base, float64(s.warmup))
		return at * (s.warmStart + (1-s.warmStart)*float64(step+1)/float64(s.warmup))
	}
	return s.rate0(base, float64(step))
}

// rate0 is the kind's rate at step x, without the warm-up.
func (s Schedule) rate0(lr, x float64) float64 {
	p := x / s.decay
	if s.stair {
		p = math.Floor(p)
	}
	switch s.kind {
	case "exponential":
		return lr * math.Pow(s.rate, p)
	case "inverse_time":
		return lr / (1 + s.rate*p)
	case "natural_exp":
		return lr * math.Exp(-s.rate*p)
	case "polynomial":
		ds := s.decay
		if s.stair { // cycle
			ds *= max(1, math.Ceil(x/s.decay))
		} else {
			x = min(x, ds)
		}
		return (lr-s.end)*math.Pow(1-x/ds, s.power) + s.end
	case "piecewise_constant":
		// TF: values[0] while x <= boundaries[0], values[i] while
		// boundaries[i-1] < x <= boundaries[i].
		i, _ := slices.BinarySearch(s.marks, x)
		return s.values[i]
	case "cosine":
		x = min(x, s.decay)
		c := 0.5 * (1 + math.Cos(math.Pi*x/s.decay))
		return lr * ((1-s.end)*c + s.end)
	case "step":
		return lr * math.Pow(s.rate, math.Floor(x/s.decay))
	case "multistep":
		// torch: gamma to the number of milestones <= x.
		n := 0
		for _, m := range s.marks {
			if m <= x {
				n++
			}
		}
		return lr * math.Pow(s.rate, float64(n))
	case "exponential_lr":
		return lr * math.Pow(s.rate, x)
	case "cosine_annealing":
		return s.end + (lr-s.end)*(1+math.Cos(math.Pi*x/s.decay))/2
	}
	return lr
}
