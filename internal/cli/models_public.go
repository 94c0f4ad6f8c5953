package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/paramserv/paramserv/internal/catalog"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/trainer"
)

// programs run the models of the catalog that are programs written on the
// public API (packages under models/, which import only the root package),
// reachable as --model=NAME of train and local like the built-in ones: each
// runs one worker task (the ps are the same as for any model), given the
// resolved configuration (cluster, optimizer and steps with the catalog's
// defaults applied) and the flags, for the model's own. Every catalog entry
// that is not built in has one (TestEveryProgramRuns).
var programs = map[string]func(ctx context.Context, cfg trainer.Config, f *trainFlags) error{
	"mf":           runMF,
	"deep_ctr":     runDeepCTR,
	"lda":          func(ctx context.Context, c trainer.Config, f *trainFlags) error { return runLDA(ctx, c, f) },
	"logreg_lbfgs": func(ctx context.Context, c trainer.Config, f *trainFlags) error { return runLBFGS(ctx, c, f) },
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

// updateRuleFlags choose the update rule on the ps and the batches of a
// step; a model with a catalog.Entry.CustomRule refuses them.
var updateRuleFlags = []string{"optimizer", "learning_rate", "batch_size", "momentum", "use_nesterov",
	"beta1", "beta2", "epsilon", "initial_accumulator_value", "ftrl_beta", "l1", "l2",
	"l2_shrinkage", "learning_rate_power", "rho", "centered", "weight_decay", "lr_schedule"}

// checkUpdateRuleFlags refuses an update-rule flag given to a model that
// picks its own rule and batches.
func (f *trainFlags) checkUpdateRuleFlags() error {
	e, err := catalog.Lookup(f.model)
	if err != nil || e.CustomRule == "" {
		return nil
	}
	for _, name := range updateRuleFlags {
		if f.set(name) {
			return fmt.Errorf("--%s: --model=%s %s, so it takes no optimizer, learning rate or batch size; drop it", name, f.model, e.CustomRule)
		}
	}
	return nil
}
