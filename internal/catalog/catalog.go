// Package catalog is the one list of the models a job trains by name: the
// names --model takes (paramserv train, local and eval), each with the
// defaults the command line uses for the flags not given, the model-only
// flags it reads, and how it is run.
//
// A model is either built in, trained by the built-in loops of package
// trainer (Entry.New builds a worker's model), or a program written on the
// public API (packages under models/ at the repository's root), which runs
// its own worker loop; the command line binds each program to the function
// that runs it.
package catalog

import (
	"fmt"
	"sort"
	"strings"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/models/linreg"
	"github.com/paramserv/paramserv/internal/models/mlp"
	"github.com/paramserv/paramserv/internal/models/sparselr"
)

// Entry is one model of the catalog.
type Entry struct {
	// The defaults of the flags whose zero means "the model's".
	Optimizer       string
	LearningRate    float64
	TrainSteps      int64 // 0: the model picks its own count
	StepsToValidate int64
	// Uses lists the model-only flags (see cli's modelOnlyFlags) the model
	// reads; the others are refused.
	Uses []string
	// New builds one worker's model of a built-in model; nil for a program
	// on the public API.
	New func(model.Config) (model.Model, error)
	// CustomRule, when set, says how the model updates its parameters
	// without the job's optimizer (the update-rule flags are then
	// refused).
	CustomRule string
}

// Builtin reports whether the built-in loops train the model.
func (e Entry) Builtin() bool { return e.New != nil }

// programSum are the defaults of the programs that pick their own update
// rule (a plain sum on the ps) and their own step counts (Gibbs sweeps,
// L-BFGS iterations) when --train_steps is unset.
var programSum = Entry{Optimizer: "sgd", LearningRate: 1, StepsToValidate: 100}

// entries are the models by --model name.
var entries = map[string]Entry{
	"linreg": {
		New:       func(c model.Config) (model.Model, error) { return linreg.New(c) },
		Optimizer: "sgd", LearningRate: 0.01, TrainSteps: 3000, StepsToValidate: 100,
	},
	// The TensorFlow distributed MNIST example: 784-100-10 MLP, Adam at 0.01.
	"mnist": {
		New:       func(c model.Config) (model.Model, error) { return mlp.New(c) },
		Optimizer: "adam", LearningRate: 0.01, TrainSteps: 10000, StepsToValidate: 200,
		Uses: []string{"hidden_units", "dataset", "data_dir"},
	},
	// Sparse logistic regression over hash-keyed feature ids, FTRL-Proximal.
	"sparse_lr": {
		New:       func(c model.Config) (model.Model, error) { return sparselr.New(c) },
		Optimizer: "ftrl", LearningRate: 0.2, TrainSteps: 3000, StepsToValidate: 500,
		Uses: []string{"data_dir", "train_data", "test_data", "input_format", "num_features", "fields",
			"skip_bad_lines", "min_count", "evict_after_steps", "shuffle_buffer", "validation_data"},
	},
	// Programs on the public API.
	"mf": {Optimizer: "adagrad", LearningRate: 0.05, TrainSteps: 15000, StepsToValidate: 1000,
		Uses: []string{"data_dir", "train_data", "test_data", "dim", "reg"}},
	"deep_ctr": {Optimizer: "ftrl", LearningRate: 0.1, TrainSteps: 3000, StepsToValidate: 500,
		Uses: []string{"data_dir", "train_data", "test_data", "hidden_units", "min_count", "evict_after_steps", "dim", "deep_scale",
			"dense_optimizer", "dense_learning_rate"}},
	"lda": withRule(programSum, []string{"data_dir", "train_data"},
		"adds the Gibbs sampler's count deltas on the ps"),
	"logreg_lbfgs": withRule(programSum, []string{"data_dir", "train_data", "test_data", "input_format", "num_features"},
		"sums full-batch gradients on the ps and steps by L-BFGS with a line search"),
}

func withRule(e Entry, uses []string, rule string) Entry {
	e.Uses, e.CustomRule = uses, rule
	return e
}

// Lookup returns the model named name, or an error naming the known ones.
func Lookup(name string) (Entry, error) {
	e, ok := entries[name]
	if !ok {
		return Entry{}, fmt.Errorf("unknown model %q (want one of %s)", name, strings.Join(Names(), ", "))
	}
	return e, nil
}

// Names lists every model name, sorted.
func Names() []string {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// BuiltinNames lists the names of the built-in models, sorted.
func BuiltinNames() []string {
	var names []string
	for _, n := range Names() {
		if entries[n].Builtin() {
			names = append(names, n)
		}
	}
	return names
}

// New builds one worker's model of the built-in model named name.
func New(name string, cfg model.Config) (model.Model, error) {
	e, ok := entries[name]
	if !ok || !e.Builtin() {
		return nil, fmt.Errorf("unknown --model %q (want one of %s)", name, strings.Join(BuiltinNames(), ", "))
	}
	return e.New(cfg)
}
