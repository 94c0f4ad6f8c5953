package trainer

import (
	"fmt"
	"sort"
	"strings"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/models/linreg"
	"github.com/paramserv/paramserv/internal/models/mlp"
	"github.com/paramserv/paramserv/internal/models/sparselr"
)

// ModelInfo describes a model the trainer knows, with the defaults the
// command line uses when a flag is not given.
type ModelInfo struct {
	New             func(model.Config) (model.Model, error)
	Optimizer       string
	LearningRate    float64
	TrainSteps      int64
	StepsToValidate int64
}

// Models lists the known models by --model name.
var Models = map[string]ModelInfo{
	"linreg": {
		New:       func(c model.Config) (model.Model, error) { return linreg.New(c) },
		Optimizer: "sgd", LearningRate: 0.01, TrainSteps: 3000, StepsToValidate: 100,
	},
	// The TensorFlow distributed MNIST example: 784-100-10 MLP, Adam at 0.01.
	"mnist": {
		New:       func(c model.Config) (model.Model, error) { return mlp.New(c) },
		Optimizer: "adam", LearningRate: 0.01, TrainSteps: 10000, StepsToValidate: 200,
	},
	// Sparse logistic regression over hash-keyed feature ids, FTRL-Proximal.
	"sparse_lr": {
		New:       func(c model.Config) (model.Model, error) { return sparselr.New(c) },
		Optimizer: "ftrl", LearningRate: 0.2, TrainSteps: 3000, StepsToValidate: 500,
	},
}

// ModelNames lists the known model names, sorted.
func ModelNames() []string {
	var names []string
	for n := range Models {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewModel builds the named model for one worker.
func NewModel(name string, cfg model.Config) (model.Model, error) {
	info, ok := Models[name]
	if !ok {
		return nil, fmt.Errorf("unknown --model %q (want one of %s)", name, strings.Join(ModelNames(), ", "))
	}
	return info.New(cfg)
}
