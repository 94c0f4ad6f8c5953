package client_test

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
)

// A custom model written directly against the worker API: fit y = 3x + 1
// with a weight and a bias held on two parameter servers, overlapping the
// computation of the next gradient with nothing more than the async call.
func Example() {
	ctx := context.Background()

	// Two ps on loopback (normally separate processes: paramserv train
	// --job_name=ps), stopped when the example ends.
	serveCtx, stop := context.WithCancel(ctx)
	var servers sync.WaitGroup
	defer func() { stop(); servers.Wait() }()
	var addrs []string
	for task := 0; task < 2; task++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		addrs = append(addrs, lis.Addr().String())
		s := server.New(server.Config{Task: task, NumWorkers: 1})
		servers.Go(func() { server.ServeListener(serveCtx, lis, s) })
	}

	vars := []model.Variable{{Name: "w", Shape: []int{1}}, {Name: "b", Shape: []int{1}}}
	c, err := client.New(addrs, vars, client.Options{Worker: 0})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if _, err := c.WaitReady(ctx, false); err != nil {
		panic(err)
	}
	// The chief initialises every variable and sets the mode.
	if _, err := c.Init(ctx, model.NewParams(vars), client.InitOptions{
		Optimizer:  optim.Config{Name: "sgd", LearningRate: 0.1},
		NumWorkers: 1,
	}); err != nil {
		panic(err)
	}

	params, grads := model.NewParams(vars), model.NewParams(vars)
	step, err := c.Pull(ctx, 0, params)
	if err != nil {
		panic(err)
	}
	xs := []float32{-1, 0, 1, 2}
	for step < 200 {
		// Gradient of the mean squared error of w·x + b against 3x + 1.
		var gw, gb float32
		for _, x := range xs {
			r := params["w"][0]*x + params["b"][0] - (3*x + 1)
			gw += 2 * r * x / float32(len(xs))
			gb += 2 * r / float32(len(xs))
		}
		grads["w"][0], grads["b"][0] = gw, gb
		call := c.PushPullAsync(ctx, step, grads, 0, params)
		<-call.Done // a real model would prepare its next batch here
		if call.Err != nil {
			panic(call.Err)
		}
		step = call.Step
	}
	fmt.Printf("global step %d: w = %.3f, b = %.3f\n", step, params["w"][0], params["b"][0])
	// Output: global step 200: w = 3.000, b = 1.000
}
