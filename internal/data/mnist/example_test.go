package mnist_test

import (
	"fmt"

	"github.com/paramserv/paramserv/internal/data/mnist"
)

func ExampleSet_Partition() {
	// Ten blank images labelled 0..9 stand in for mnist.Load(dir).Train.
	train := &mnist.Set{Images: make([]float32, 10*mnist.Pixels), Labels: []uint8{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}

	// Worker 1 of 3 trains on its own contiguous part.
	part, err := train.Partition(1, 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("worker 1 labels:", part.Labels)

	// Batches of 3 (here a whole epoch each), reshuffled every epoch, the
	// same for the same seed.
	batches, err := mnist.NewBatches(part, 3, 42)
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		var labels []uint8
		for _, i := range batches.Next() {
			labels = append(labels, part.Labels[i])
		}
		fmt.Println("batch labels:", labels, "epochs done:", batches.Epoch())
	}
	// Output:
	// worker 1 labels: [3 4 5]
	// batch labels: [4 5 3] epochs done: 1
	// batch labels: [5 4 3] epochs done: 2
}
