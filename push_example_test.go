package paramserv_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/paramserv/paramserv"
)

// Pushing without reading back: a worker that needs the values only now
// and then pushes each step's gradients with Push and pulls when it wants
// to look. Here it pushes a constant gradient to a ps whose SGD (rate 0.5)
// moves each value by -0.5 a push, then pushes one table's rows with
// PushRows, a push (and a step) of its own.
func ExampleWorker_Push() {
	ctx := context.Background()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	cluster := fmt.Sprintf(`"cluster":{"ps":[%q],"worker":["127.0.0.1:1"]}`, lis.Addr())
	go paramserv.ServePS(ctx, paramserv.PSConfig{
		TFConfig: `{` + cluster + `,"task":{"type":"ps","index":0}}`,
		Listen:   func(string) (net.Listener, error) { return lis, nil },
	})
	w, err := paramserv.Start(ctx, paramserv.Config{
		TFConfig:  `{` + cluster + `,"task":{"type":"worker","index":0}}`,
		Variables: []paramserv.Variable{{Name: "v", Shape: []int{2}}},
		Tables:    []paramserv.Table{{Name: "emb", Dim: 1}},
		Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 0.5},
	}, paramserv.Params{"v": {10, 20}})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	grads := paramserv.Params{"v": {1, 2}}
	for range 4 {
		if _, err := w.Push(ctx, grads); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.PushRows(ctx, "emb", []uint64{42}, []float32{3}); err != nil {
		log.Fatal(err)
	}
	params := w.NewParams()
	step, err := w.Pull(ctx, params)
	if err != nil {
		log.Fatal(err)
	}
	row := make([]float32, 1)
	if err := w.PullRows(ctx, "emb", []uint64{42}, row); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("step %d: v %v, row 42 %v\n", step, params["v"], row)
	if err := w.Done(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// step 5: v [8 16], row 42 [-1.5]
}
