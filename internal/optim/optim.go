// Package optim holds the update rules the parameter servers apply: SGD,
// Momentum, Adagrad, Adam and FTRL-Proximal, each a pure function over float32
// slices. A rule keeps no state of its own: the caller owns the state slices
// (one per StateSlots) and passes them in, so the same rule serves a dense
// variable (one long slice) and a sparse table (one short slice per row, the
// state held in flat arrays).
//
// Rules are safe for concurrent use on disjoint slices; nothing here locks.
package optim

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Rule is an update rule over a slice of parameters.
type Rule interface {
	// Name is the rule's flag name: "sgd", "momentum", "adagrad", "adam", "ftrl".
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
// hyper-parameter means the rule's default (see New).
type Config struct {
	Name         string  `json:"name"`
	LearningRate float64 `json:"learning_rate"`
	// Momentum: momentum coefficient (0.9) and Nesterov.
	Momentum float64 `json:"momentum,omitempty"`
	Nesterov bool    `json:"nesterov,omitempty"`
	// Adagrad: initial accumulator value (0.1).
	InitialAccumulator float64 `json:"initial_accumulator,omitempty"`
	// Adam: beta1 (0.9), beta2 (0.999), epsilon (1e-8; Adagrad uses 1e-7 as TF does).
	Beta1   float64 `json:"beta1,omitempty"`
	Beta2   float64 `json:"beta2,omitempty"`
	Epsilon float64 `json:"epsilon,omitempty"`
	// FTRL-Proximal: alpha is LearningRate; beta (1), L1 and L2 (0).
	FTRLBeta float64 `json:"ftrl_beta,omitempty"`
	L1       float64 `json:"l1,omitempty"`
	L2       float64 `json:"l2,omitempty"`
}

// ErrUnknown is returned by New for a name that names no rule.
var ErrUnknown = errors.New("optim: unknown optimizer")

var constructors = map[string]func(Config) (Rule, error){}

// Names lists the known rule names, sorted.
func Names() []string {
	names := make([]string, 0, len(constructors))
	for n := range constructors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New returns the rule that cfg names, with defaults filled in for zero
// hyper-parameters. A negative or non-finite hyper-parameter is an error.
func New(cfg Config) (Rule, error) {
	c, ok := constructors[strings.ToLower(cfg.Name)]
	if !ok {
		return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknown, cfg.Name, strings.Join(Names(), ", "))
	}
	return c(cfg)
}
