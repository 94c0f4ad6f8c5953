package paramserv_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/paramserv/paramserv"
)

// Overlapping computation with communication: while the push of one
// gradient and the pull of the next values are in flight, the next
// gradient is computed at the values already held, one push older. Two
// sets of values alternate: the call fills one while the program reads the
// other. The job is Example's (y = 2x + 10 by least squares, one ps, one
// worker), trained asynchronously.
func ExampleWorker_PushPullAsync() {
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
		Variables: []paramserv.Variable{{Name: "weight", Shape: []int{1}}, {Name: "bias", Shape: []int{1}}},
		Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 0.1},
	}, paramserv.Params{"weight": {0}, "bias": {0}})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	gradient := func(p, g paramserv.Params) {
		g["weight"][0], g["bias"][0] = 0, 0
		for _, x := range []float32{-1, -0.5, 0, 0.5, 1} {
			e := p["weight"][0]*x + p["bias"][0] - (2*x + 10)
			g["weight"][0] += 2 * e * x / 5
			g["bias"][0] += 2 * e / 5
		}
	}

	params := [2]paramserv.Params{w.NewParams(), w.NewParams()}
	grads := [2]paramserv.Params{w.NewParams(), w.NewParams()}
	if _, err := w.Pull(ctx, params[0]); err != nil {
		log.Fatal(err)
	}
	call := w.PullAsync(ctx, params[1])
	i := 0
	for ; ; i ^= 1 {
		gradient(params[i], grads[i]) // while the call fills params[i^1]
		step, err := call.Wait()
		if err != nil {
			log.Fatal(err)
		}
		if step >= 500 {
			break
		}
		call = w.PushPullAsync(ctx, grads[i], params[i])
	}
	if err := w.Done(ctx); err != nil {
		log.Fatal(err)
	}
	p := params[i^1] // the values the last call pulled
	fmt.Printf("after %d steps: weight %.2f, bias %.2f\n", w.Step(), p["weight"][0], p["bias"][0])
	// Output:
	// after 500 steps: weight 2.00, bias 10.00
}
