// Command linreg is a model of its own trained on paramserv, in a module of
// its own that imports only paramserv's public package: linear regression
// y = 2x + 10 + noise, each worker on its own samples, the two variables on
// the ps. Run it as every worker of a local cluster:
//
//	paramserv local --ps=2 --workers=2 -- go run . --train_steps=2000
//
// By default it runs its own loop (paramserv.Start, Pull, PushPull, Done);
// with --builtin_loop the same model runs in the built-in training loop
// (paramserv.Run), which also logs progress, evaluates at the end and
// writes --result_file.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"

	"github.com/paramserv/paramserv"
)

func main() {
	steps := flag.Int64("train_steps", 2000, "stop when the global step reaches this")
	lr := flag.Float64("learning_rate", 0.05, "SGD's learning rate, applied on the ps")
	sync := flag.Bool("sync_replicas", false, "average every worker's gradients of a step")
	ckpt := flag.String("checkpoint_dir", "", "the ps's --checkpoint_dir, to survive a ps restart")
	builtin := flag.Bool("builtin_loop", false, "run the model in paramserv's own training loop (paramserv.Run)")
	result := flag.String("result_file", "", "with --builtin_loop: the chief's JSON summary")
	flag.Parse()
	logger := log.New(os.Stderr, "", log.LstdFlags)

	ctx := context.Background()
	if *builtin {
		err := paramserv.Run(ctx, paramserv.RunConfig{
			Name:      "linreg",
			NewModel:  func(c paramserv.ModelConfig) (paramserv.Model, error) { return newModel(c.Worker), nil },
			Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: *lr}, Sync: *sync,
			TrainSteps: *steps, StepsToValidate: 500, BatchSize: batch,
			CheckpointDir: *ckpt, SaveSteps: 500, ResultFile: *result, Logf: logger.Printf,
		})
		if err != nil {
			logger.Fatal(err)
		}
		return
	}
	m := newModel(0)
	w, err := paramserv.Start(ctx, paramserv.Config{
		Variables: m.Variables(), Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: *lr},
		Sync: *sync, CheckpointDir: *ckpt, SaveSteps: 500, Logf: logger.Printf,
	}, m.Init(0))
	if err != nil {
		logger.Fatal(err)
	}
	defer w.Close()

	m = newModel(w.Index()) // each worker its own samples
	params, grads := w.NewParams(), w.NewParams()
	if _, err := w.Pull(ctx, params); err != nil {
		logger.Fatal(err)
	}
	for w.Step() < *steps {
		loss, err := m.ComputeGradients(params, grads)
		if err != nil {
			logger.Fatal(err)
		}
		w.ReportLoss(loss, 0) // for the metrics and paramserv local's progress line
		if _, err := w.PushPull(ctx, grads, params); err != nil {
			logger.Fatal(err)
		}
	}
	if err := w.Done(ctx); err != nil {
		logger.Fatal(err)
	}
	fmt.Printf("worker %d: global step %d, weight %.3f, bias %.3f\n", w.Index(), w.Step(), params["weight"][0], params["bias"][0])
}

const batch = 10

// model is the linear regression as a paramserv.Model: each worker draws
// its own samples.
type model struct{ rng *rand.Rand }

func newModel(worker int) *model { return &model{rng: rand.New(rand.NewPCG(uint64(worker), 7))} }

func (*model) Variables() []paramserv.Variable {
	return []paramserv.Variable{{Name: "weight", Shape: []int{1}}, {Name: "bias", Shape: []int{1}}}
}

func (*model) Init(int64) paramserv.Params { return paramserv.Params{"weight": {0}, "bias": {0}} }

func (m *model) ComputeGradients(params, grads paramserv.Params) (float64, error) {
	var gw, gb float32
	var loss float64
	for range batch {
		x := float32(m.rng.Float64()*2 - 1)
		y := 2*x + 10 + float32(m.rng.NormFloat64()*0.1)
		e := params["weight"][0]*x + params["bias"][0] - y
		gw, gb = gw+2*e*x/batch, gb+2*e/batch
		loss += float64(e*e) / batch
	}
	grads["weight"][0], grads["bias"][0] = gw, gb
	return loss, nil
}

func (*model) Progress(local, global int64, p paramserv.Params, loss float64) string {
	return fmt.Sprintf("step: %d, weight: %f, bias: %f, loss: %f", global, p["weight"][0], p["bias"][0], loss)
}

func (*model) Evaluate(p paramserv.Params) (map[string]float64, error) {
	return map[string]float64{"weight": float64(p["weight"][0]), "bias": float64(p["bias"][0])}, nil
}
