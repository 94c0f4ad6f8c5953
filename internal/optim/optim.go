package optim

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Rule is an update rule over a slice of parameters.
type Rule interface {
	// Name is the rule's flag name: "sgd", "momentum", "adam", ... (Names).
	Name() string
	// StateSlots is the number of state vectors the rule needs, each as long
	// as the parameter slice it serves.
	StateSlots() int
	// InitState fills freshly allocated state slots (all zero) with the
	// rule's initial values (Adagrad's initial accumulator, say).
	InitState(state [][]float32)
	// Update applies grad to param in place. state holds StateSlots() slices,
	// each len(param). step is the 1-based count of updates applied to this
	// slice including this one (Adam's bias correction uses it).
	Update(param, grad []float32, state [][]float32, step int64)
}

// Config names a rule and its hyper-parameters. The zero value of a
// hyper-parameter means the rule's default (see Resolved).
type Config struct {
	Name         string  `json:"name"`
	LearningRate float64 `json:"learning_rate"`
	// Momentum: momentum coefficient (0.9) and Nesterov.
	Momentum float64 `json:"momentum,omitempty"`
	Nesterov bool    `json:"nesterov,omitempty"`
	// Adagrad and FTRL: initial accumulator value (0.1).
	InitialAccumulator float64 `json:"initial_accumulator,omitempty"`
	// Adam: beta1 (0.9), beta2 (0.999), epsilon (1e-8; Adagrad: 0, as TF1).
	Beta1   float64 `json:"beta1,omitempty"`
	Beta2   float64 `json:"beta2,omitempty"`
	Epsilon float64 `json:"epsilon,omitempty"`
	// FTRL-Proximal: alpha is LearningRate; beta (1), L1 and L2 (0).
	FTRLBeta float64 `json:"ftrl_beta,omitempty"`
	// L1 and L2: FTRL's, AdagradDA's and the proximal rules' regularization
	// strengths (0).
	L1 float64 `json:"l1,omitempty"`
	L2 float64 `json:"l2,omitempty"`
	// L2Shrinkage: FTRL's l2_shrinkage_regularization_strength (0), TF's
	// ApplyFtrlV2.
	L2Shrinkage float64 `json:"l2_shrinkage,omitempty"`
	// LearningRatePower: FTRL's learning_rate_power (nil: -0.5), <= 0: a
	// coordinate's rate is LearningRate * n^LearningRatePower over its
	// accumulated squared gradients n (0: a fixed rate). A pointer, as 0
	// is a rate of its own rather than "the default".
	LearningRatePower *float64 `json:"learning_rate_power,omitempty"`
	// Rho: Adadelta's rho (0.95) and RMSProp's decay (0.9).
	Rho float64 `json:"rho,omitempty"`
	// Centered: RMSProp normalizes by the estimated variance.
	Centered bool `json:"centered,omitempty"`
	// WeightDecay: AdamW's (0.01) and LAMB's (0) decoupled weight decay.
	WeightDecay float64 `json:"weight_decay,omitempty"`
	// Schedule is the learning-rate schedule over the global step, in the
	// syntax ParseSchedule reads ("" or "constant": LearningRate always).
	Schedule string `json:"schedule,omitempty"`
}

// ErrUnknown is returned by New for a name that names no rule.
var ErrUnknown = errors.New("optim: unknown optimizer")

// ErrInvalidConfig is returned, wrapped in a *ConfigError, by New for a
// hyper-parameter out of range.
var ErrInvalidConfig = errors.New("optim: invalid hyper-parameter")

// ConfigError says which hyper-parameter New rejected and why.
type ConfigError struct {
	Rule  string  // the rule's name, as in Config.Name
	Field string  // the field's JSON name, "learning_rate", "beta1", ...
	Value float64 // what came
	Want  string  // what was expected, "> 0 and finite", ...
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("optim: %s: %s = %v, want %s", e.Rule, e.Field, e.Value, e.Want)
}

// Unwrap lets errors.Is(err, ErrInvalidConfig) hold.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

var constructors = map[string]func(Config) (Rule, error){
	"sgd":      newSGD,
	"momentum": newMomentum,
	"adagrad":  newAdagrad,
	"adam":     newAdam,
	"ftrl":     newFTRL,

	"adagrad_da":       newAdagradDA,
	"adadelta":         newAdadelta,
	"rmsprop":          newRMSProp,
	"proximal_sgd":     newProximalSGD,
	"proximal_adagrad": newProximalAdagrad,
	"adamw":            newAdamW,
	"lamb":             newLAMB,
}

// Names lists the known rule names, sorted.
func Names() []string {
	names := make([]string, 0, len(constructors))
	for n := range constructors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New returns the rule that cfg names (case-insensitive), built from
// Resolved(cfg): zero hyper-parameters take the rule's defaults.
// LearningRate has no default: it must be positive and finite. Every other hyper-parameter, whether or not the
// rule uses it, must be finite and not negative, and Beta1 and Beta2 must be
// below 1; anything else is a *ConfigError wrapping ErrInvalidConfig.
func New(cfg Config) (Rule, error) {
	name := strings.ToLower(cfg.Name)
	c, ok := constructors[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknown, cfg.Name, strings.Join(Names(), ", "))
	}
	if err := validate(name, cfg); err != nil {
		return nil, err
	}
	// The defaults live in Resolved alone: a constructor takes every
	// hyper-parameter as given.
	return c(Resolved(cfg))
}

// validate checks every hyper-parameter in cfg against its range.
func validate(rule string, cfg Config) error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if !(cfg.LearningRate > 0) || !finite(cfg.LearningRate) {
		return &ConfigError{Rule: rule, Field: "learning_rate", Value: cfg.LearningRate, Want: "> 0 and finite"}
	}
	for _, f := range []struct {
		name  string
		v     float64
		below float64 // exclusive upper bound; +Inf for none
	}{
		{"momentum", cfg.Momentum, math.Inf(1)},
		{"initial_accumulator", cfg.InitialAccumulator, math.Inf(1)},
		{"beta1", cfg.Beta1, 1},
		{"beta2", cfg.Beta2, 1},
		{"epsilon", cfg.Epsilon, math.Inf(1)},
		{"ftrl_beta", cfg.FTRLBeta, math.Inf(1)},
		{"l1", cfg.L1, math.Inf(1)},
		{"l2", cfg.L2, math.Inf(1)},
		{"l2_shrinkage", cfg.L2Shrinkage, math.Inf(1)},
		{"rho", cfg.Rho, 1},
		{"weight_decay", cfg.WeightDecay, math.Inf(1)},
	} {
		if !(f.v >= 0) || !finite(f.v) || f.v >= f.below {
			want := ">= 0 and finite"
			if !math.IsInf(f.below, 1) {
				want = fmt.Sprintf(">= 0 and < %v", f.below)
			}
			return &ConfigError{Rule: rule, Field: f.name, Value: f.v, Want: want}
		}
	}
	if p := cfg.LearningRatePower; p != nil && !(*p <= 0 && finite(*p)) {
		return &ConfigError{Rule: rule, Field: "learning_rate_power", Value: *p, Want: "<= 0 and finite"}
	}
	if _, err := ParseSchedule(cfg.Schedule); err != nil {
		return err
	}
	return nil
}

// Equal reports whether cfg and o are the same configuration, comparing
// LearningRatePower by value (== compares the pointers).
func (cfg Config) Equal(o Config) bool {
	if (cfg.LearningRatePower == nil) != (o.LearningRatePower == nil) ||
		cfg.LearningRatePower != nil && *cfg.LearningRatePower != *o.LearningRatePower {
		return false
	}
	cfg.LearningRatePower, o.LearningRatePower = nil, nil
	return cfg == o
}

// FTRLPower is cfg's FTRL learning_rate_power: LearningRatePower, or its
// default -0.5.
func (cfg Config) FTRLPower() float64 {
	if cfg.LearningRatePower == nil {
		return -0.5
	}
	return *cfg.LearningRatePower
}

// orDefault returns v, or def where v is zero (Config's "use the default").
func orDefault(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

// PerCoordinate says whether r updates each coordinate from that
// coordinate's parameter, gradient and state alone, so that a slice may be
// updated in pieces with the same result. Every rule is, except LAMB,
// whose trust ratio is a norm over the whole slice. A rule of another
// package says so by implementing PerCoordinate() bool; otherwise it is
// assumed to be per-coordinate.
func PerCoordinate(r Rule) bool {
	if p, ok := r.(interface{ PerCoordinate() bool }); ok {
		return p.PerCoordinate()
	}
	return true
}

// WithRate returns r with its learning rate set to lr and every other
// hyper-parameter unchanged, for a schedule to apply; r itself is not
// changed. A rule of another package is returned as it is.
func WithRate(r Rule, lr float64) Rule {
	if w, ok := r.(interface{ withRate(float64) Rule }); ok {
		return w.withRate(lr)
	}
	return r
}
