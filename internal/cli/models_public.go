package cli

import (
	"context"
	"encoding/json"
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
	"mf":           {run: runMF, defaults: trainer.ModelInfo{Optimizer: "adagrad", LearningRate: 0.05, TrainSteps: 15000, StepsToValidate: 1000}},
	"deep_ctr":     {run: runDeepCTR, defaults: trainer.ModelInfo{Optimizer: "ftrl", LearningRate: 0.1, TrainSteps: 3000, StepsToValidate: 500}},
	"lda":          {run: func(ctx context.Context, c trainer.Config, _ *trainFlags) error { return runLDA(ctx, c) }, defaults: publicSumInfo},
	"logreg_lbfgs": {run: func(ctx context.Context, c trainer.Config, _ *trainFlags) error { return runLBFGS(ctx, c) }, defaults: publicSumInfo},
}

// publicModel is a model of publicModels: run gets the resolved
// configuration (cluster, optimizer and steps with the defaults applied)
// and the flags, for the model's own.
type publicModel struct {
	run      func(ctx context.Context, cfg trainer.Config, f *trainFlags) error
	defaults trainer.ModelInfo
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
