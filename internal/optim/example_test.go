package optim_test

import (
	"fmt"

	"github.com/paramserv/paramserv/internal/optim"
)

// Minimise f(p) = (p-3)^2 coordinate-wise with Adam: the caller owns the
// state, lets InitState fill it, and counts steps from 1.
func Example() {
	rule, err := optim.New(optim.Config{Name: "adam", LearningRate: 0.1})
	if err != nil {
		fmt.Println(err)
		return
	}
	param := []float32{0, 10}
	state := make([][]float32, rule.StateSlots())
	for i := range state {
		state[i] = make([]float32, len(param))
	}
	rule.InitState(state)

	grad := make([]float32, len(param))
	for step := int64(1); step <= 500; step++ {
		for i, p := range param {
			grad[i] = 2 * (p - 3)
		}
		rule.Update(param, grad, state, step)
	}
	fmt.Printf("%.2f %.2f\n", param[0], param[1])
	// Output: 3.00 3.00
}

// A hyper-parameter out of range is an error that names it.
func ExampleNew_invalid() {
	_, err := optim.New(optim.Config{Name: "adam", LearningRate: 0.001, Beta2: 1})
	fmt.Println(err)
	// Output: optim: adam: beta2 = 1, want >= 0 and < 1
}
