package sparse_test

import (
	"fmt"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// A shard's embedding table: rows of 4 values, trained with FTRL, started
// from a seeded normal, admitted on a key's second sighting, and dropped
// after 1000 idle steps.
func Example() {
	rule, err := optim.New(optim.Config{Name: "ftrl", LearningRate: 0.1})
	if err != nil {
		panic(err)
	}
	table, err := sparse.New(sparse.Config{
		Dim:             4,
		Rule:            rule,
		Init:            sparse.RandomNormal{Stddev: 0.01, Seed: 1},
		MinCount:        2,
		EvictAfterSteps: 1000,
	})
	if err != nil {
		panic(err)
	}

	keys := []uint64{17, 1 << 40}
	values := make([]float32, len(keys)*table.Dim())
	// Step 1: a worker pulls (first sighting: no row yet) ...
	if err := table.Pull(keys, values); err != nil {
		panic(err)
	}
	fmt.Println("rows after first pull:", table.Len())
	// ... and pushes gradients (second sighting: rows made, then updated).
	grads := []float32{0.5, 0, 0, 0, -0.5, 0, 0, 0}
	if err := table.Push(keys, grads, 1); err != nil {
		panic(err)
	}
	fmt.Println("rows after push:", table.Len())

	// Later, the server evicts idle rows and checkpoints the rest.
	fmt.Println("evicted at step 500:", table.Evict(500))
	fmt.Println("evicted at step 2000:", table.Evict(2000))
	snap := table.Export()
	fmt.Println("rows in checkpoint:", len(snap.Keys))
	// Output:
	// rows after first pull: 0
	// rows after push: 2
	// evicted at step 500: 0
	// evicted at step 2000: 2
	// rows in checkpoint: 0
}
