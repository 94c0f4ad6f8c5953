// Command linreg is a model of its own trained on paramserv, in a module of
// its own that imports only paramserv's public package: linear regression
// y = 2x + 10 + noise, each worker on its own samples, the two variables on
// the ps. Run it as every worker of a local cluster:
//
//	paramserv local --ps=2 --workers=2 -- go run . --train_steps=2000
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
	flag.Parse()
	logger := log.New(os.Stderr, "", log.LstdFlags)

	ctx := context.Background()
	vars := []paramserv.Variable{{Name: "weight", Shape: []int{1}}, {Name: "bias", Shape: []int{1}}}
	w, err := paramserv.Start(ctx, paramserv.Config{
		Variables: vars, Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: *lr},
		Sync: *sync, CheckpointDir: *ckpt, SaveSteps: 500, Logf: logger.Printf,
	}, paramserv.Params{"weight": {0}, "bias": {0}})
	if err != nil {
		logger.Fatal(err)
	}
	defer w.Close()

	rng := rand.New(rand.NewPCG(uint64(w.Index()), 7))
	params, grads := w.NewParams(), w.NewParams()
	if _, err := w.Pull(ctx, params); err != nil {
		logger.Fatal(err)
	}
	for w.Step() < *steps {
		var gw, gb float32
		const batch = 10
		for range batch {
			x := float32(rng.Float64()*2 - 1)
			y := 2*x + 10 + float32(rng.NormFloat64()*0.1)
			e := params["weight"][0]*x + params["bias"][0] - y
			gw, gb = gw+2*e*x/batch, gb+2*e/batch
		}
		grads["weight"][0], grads["bias"][0] = gw, gb
		if _, err := w.PushPull(ctx, grads, params); err != nil {
			logger.Fatal(err)
		}
	}
	if err := w.Done(ctx); err != nil {
		logger.Fatal(err)
	}
	fmt.Printf("worker %d: global step %d, weight %.3f, bias %.3f\n", w.Index(), w.Step(), params["weight"][0], params["bias"][0])
}
