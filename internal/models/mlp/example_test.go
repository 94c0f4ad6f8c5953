package mlp_test

import (
	"fmt"
	"log"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/models/mlp"
)

// A single-process run: the worker computes gradients, the loop applies
// them with plain SGD, and Evaluate reports the metrics.
func ExampleNew() {
	m, err := mlp.New(model.Config{DataDir: "/path/to/data", Dataset: "mnist", Worker: 0, NumWorkers: 1})
	if err != nil {
		log.Fatal(err)
	}
	params := m.Init(1)
	grads := model.NewParams(m.Variables())
	for step := 1; step <= 1000; step++ {
		loss, err := m.ComputeGradients(params, grads)
		if err != nil {
			log.Fatal(err)
		}
		for name, p := range params {
			for i, g := range grads[name] {
				p[i] -= 0.5 * g
			}
		}
		if step%100 == 0 {
			log.Print(m.Progress(int64(step), int64(step), params, loss))
		}
	}
	metrics, err := m.Evaluate(params)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("test accuracy %.4f\n", metrics["test_accuracy"])
}
