package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/trainer"
)

// publicModels are the workloads written on the public API (packages under
// models/, which import only the root package), reachable as --model=NAME
// of train and local like the built-in ones. Their defaults fill the flags
// left unset, as trainer.Models' do; run runs one worker task (the ps are
// the same as for any model).
var publicModels = map[string]publicModel{
	"mf": {run: runMF, defaults: trainer.ModelInfo{Optimizer: "adagrad", LearningRate: 0.05, TrainSteps: 15000, StepsToValidate: 1000},
		uses: []string{"data_dir", "train_data", "test_data", "dim", "reg"}},
	"deep_ctr": {run: runDeepCTR, defaults: trainer.ModelInfo{Optimizer: "ftrl", LearningRate: 0.1, TrainSteps: 3000, StepsToValidate: 500},
		uses: []string{"data_dir", "train_data", "test_data", "hidden_units", "min_count", "evict_after_steps", "dim", "deep_scale",
			"dense_optimizer", "dense_learning_rate"}},
	"lda": {run: func(ctx context.Context, c trainer.Config, _ *trainFlags) error { return runLDA(ctx, c) }, defaults: publicSumInfo,
		uses: []string{"data_dir", "train_data"}, ownRule: "adds the Gibbs sampler's count deltas on the ps"},
	"logreg_lbfgs": {run: func(ctx context.Context, c trainer.Config, _ *trainFlags) error { return runLBFGS(ctx, c) }, defaults: publicSumInfo,
		uses:    []string{"data_dir", "train_data", "test_data", "input_format", "num_features"},
		ownRule: "sums full-batch gradients on the ps and steps by L-BFGS with a line search"},
}

// publicModel is a model of publicModels: run gets the resolved
// configuration (cluster, optimizer and steps with the defaults applied)
// and the flags, for the model's own. uses lists the modelOnlyFlags the
// model reads (the others are refused); ownRule, when set, says how the
// model updates its parameters without the job's optimizer, and
// updateRuleFlags are refused.
type publicModel struct {
	run      func(ctx context.Context, cfg trainer.Config, f *trainFlags) error
	defaults trainer.ModelInfo
	uses     []string
	ownRule  string
}

// modelNames lists every --model name, built-in and public, sorted.
func modelNames() []string {
	names := trainer.ModelNames()
	for n := range publicModels {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// tfConfigOf writes a resolved cluster back in TF_CONFIG's form, which is
// how the public API takes it.
func tfConfigOf(cl cluster.Config) string {
	type task struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	b, _ := json.Marshal(struct {
		Cluster map[string][]string `json:"cluster"`
		Task    task                `json:"task"`
	}{map[string][]string{"ps": cl.Spec.PS, "worker": cl.Spec.Workers}, task{cl.Task.Job, cl.Task.Index}})
	return string(b)
}

// modelFlagUses is the list of modelOnlyFlags the model uses, built-in or
// public, and whether the model declares one.
func modelFlagUses(model string) ([]string, bool) {
	if pm, ok := publicModels[model]; ok {
		return pm.uses, true
	}
	uses, ok := modelUses[model]
	return uses, ok
}

// updateRuleFlags choose the update rule on the ps and the batches of a
// step; a model whose publicModel has ownRule refuses them.
var updateRuleFlags = []string{"optimizer", "learning_rate", "batch_size", "momentum", "use_nesterov",
	"beta1", "beta2", "epsilon", "initial_accumulator_value", "ftrl_beta", "l1", "l2",
	"l2_shrinkage", "rho", "centered", "weight_decay", "lr_schedule"}

// checkUpdateRuleFlags refuses an update-rule flag given to a model that
// picks its own rule and batches.
func (f *trainFlags) checkUpdateRuleFlags() error {
	pm, ok := publicModels[f.model]
	if !ok || pm.ownRule == "" {
		return nil
	}
	for _, name := range updateRuleFlags {
		if f.set(name) {
			return fmt.Errorf("--%s: --model=%s %s, so it takes no optimizer, learning rate or batch size; drop it", name, f.model, pm.ownRule)
		}
	}
	return nil
}
