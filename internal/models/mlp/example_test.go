package mlp_test

import (
	"fmt"
	"log"

	"github.com/paramserv/paramserv/internal/data/mnist"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/models/mlp"
)

// A single-process run: the worker computes gradients, the loop applies
// them with plain SGD, and Evaluate reports the metrics.
//
// Compile-only on purpose (no Output line): it reads the MNIST files from
// a data directory that a test machine may not have. ExampleNewWithData
// runs the same loop on a small data set made in memory, with its output
// checked.
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

// The loop of ExampleNew on a data set made in memory: image i of class c
// has the pixels of row 2c lit (a different row per class), so a few
// steps of SGD separate the classes.
func ExampleNewWithData() {
	set := func(n int) *mnist.Set {
		s := &mnist.Set{Images: make([]float32, n*mnist.Pixels), Labels: make([]uint8, n)}
		for i := range n {
			c := i % mnist.Classes
			s.Labels[i] = uint8(c)
			row := s.Image(i)[2*c*mnist.Cols : (2*c+1)*mnist.Cols]
			for j := range row {
				row[j] = 1
			}
		}
		return s
	}
	data := &mnist.Data{Train: set(200), Validation: set(50), Test: set(50)}
	m, err := mlp.NewWithData(model.Config{HiddenUnits: 16, BatchSize: 20, Seed: 1}, data)
	if err != nil {
		log.Fatal(err)
	}
	params := m.Init(1)
	grads := model.NewParams(m.Variables())
	for step := 1; step <= 100; step++ {
		if _, err := m.ComputeGradients(params, grads); err != nil {
			log.Fatal(err)
		}
		for name, p := range params {
			for i, g := range grads[name] {
				p[i] -= 0.5 * g
			}
		}
	}
	metrics, err := m.Evaluate(params)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("validation accuracy %.2f, test accuracy %.2f\n", metrics["val_accuracy"], metrics["test_accuracy"])
	// Output:
	// validation accuracy 1.00, test accuracy 1.00
}
