package paramserv_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/paramserv/paramserv"
)

// A whole job in one program: one ps (ServePS, on a loopback port) and one
// worker that fits y = 2x + 10 by least squares, its two variables on the
// ps and SGD applied there. A real job runs the ps as paramserv processes
// and the worker under paramserv local -- CMD, which sets TF_CONFIG.
func Example() {
	ctx := context.Background()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	cluster := fmt.Sprintf(`"cluster":{"ps":[%q],"worker":["127.0.0.1:1"]}`, lis.Addr())
	psDone := make(chan error, 1)
	go func() {
		psDone <- paramserv.ServePS(ctx, paramserv.PSConfig{
			TFConfig: `{` + cluster + `,"task":{"type":"ps","index":0}}`,
			Listen:   func(string) (net.Listener, error) { return lis, nil },
		})
	}()

	w, err := paramserv.Start(ctx, paramserv.Config{
		TFConfig:  `{` + cluster + `,"task":{"type":"worker","index":0}}`,
		Variables: []paramserv.Variable{{Name: "weight", Shape: []int{1}}, {Name: "bias", Shape: []int{1}}},
		Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 0.1},
		Sync:      true,
	}, paramserv.Params{"weight": {0}, "bias": {0}}) // the chief's initial values
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	params, grads := w.NewParams(), w.NewParams()
	if _, err := w.Pull(ctx, params); err != nil {
		log.Fatal(err)
	}
	for w.Step() < 500 {
		// The gradient of the mean squared error over a fixed batch.
		var gw, gb float32
		for _, x := range []float32{-1, -0.5, 0, 0.5, 1} {
			e := params["weight"][0]*x + params["bias"][0] - (2*x + 10)
			gw, gb = gw+2*e*x/5, gb+2*e/5
		}
		grads["weight"][0], grads["bias"][0] = gw, gb
		if _, err := w.PushPull(ctx, grads, params); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Done(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("after %d steps: weight %.2f, bias %.2f\n", w.Step(), params["weight"][0], params["bias"][0])
	fmt.Println("ps:", <-psDone)
	// Output:
	// after 500 steps: weight 2.00, bias 10.00
	// ps: <nil>
}
