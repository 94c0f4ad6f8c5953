package client

import (
	"context"
	"errors"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/wire"
)

// A ps that restarts (a new process on the same address, initialised
// afresh) counts its versions from the start again, so a worker's held
// version can name a moment of the new ps too. Its incarnation is new, and
// the worker's next incremental pull reads every block: bit for bit what a
// full pull reads, although the new ps changed only one block since the
// version the worker holds.
func TestIncrementalDensePullAcrossAPSRestart(t *testing.T) {
	alwaysIncremental = true
	t.Cleanup(func() { alwaysIncremental = false })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	serve := func(lis net.Listener) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		s := server.New(server.Config{Task: 0, NumPS: 1, NumWorkers: 2})
		wg.Go(func() { server.ServeListener(ctx, lis, s) })
		return func() { cancel(); wg.Wait() }
	}
	stop := serve(lis)
	t.Cleanup(func() { stop() })

	vars := []model.Variable{{Name: "w", Shape: []int{3 * wire.DenseBlock}}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	newClient := func(worker int, incr bool) *Client {
		c, err := New([]string{addr}, vars, Options{Worker: worker, IncrementalPull: incr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	full, incr := newClient(1, false), newClient(0, true)
	values := func(v float32) model.Params {
		p := model.NewParams(vars)
		for i := range p["w"] {
			p["w"][i] = v + float32(i%7)
		}
		return p
	}
	grad := func(blocks ...int) model.Params {
		g := model.NewParams(vars) // +0: a block SGD leaves as it was
		for _, b := range blocks {
			for i := b * wire.DenseBlock; i < (b+1)*wire.DenseBlock; i++ {
				g["w"][i] = 1
			}
		}
		return g
	}
	// The same history on both: Init, then a push to block 0; the
	// worker pulls once after it.
	history := func(full *Client, initial float32) {
		t.Helper()
		var err error
		for range 50 { // the first calls after the restart may meet the old connection
			if _, err = full.WaitReady(ctx, false); err == nil {
				_, err = full.Init(ctx, values(initial), InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 0.5}, NumWorkers: 2})
			}
			if err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("initialising the ps: %v", err)
		}
		if _, _, err := full.Push(ctx, 0, grad(0, 1, 2)); err != nil {
			t.Fatal(err)
		}
	}
	pullBoth := func(full *Client, what string) {
		t.Helper()
		got := model.NewParams(vars)
		var err error
		for range 50 { // the worker's first call after the restart may meet the old connection
			_, err = incr.Pull(ctx, 0, got)
			if err == nil {
				break
			}
			if _, restarted := errors.AsType[*RestartedError](err); restarted {
				// As the trainer's recovery does: learn the new
				// incarnation, then pull again.
				st, werr := incr.WaitReady(ctx, false)
				if werr != nil {
					t.Fatal(werr)
				}
				incr.Remember(st)
				continue
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s: incremental pull: %v", what, err)
		}
		want := model.NewParams(vars)
		if _, err := full.Pull(ctx, 0, want); err != nil {
			t.Fatalf("%s: full pull: %v", what, err)
		}
		for i, w := range want["w"] {
			if math.Float32bits(got["w"][i]) != math.Float32bits(w) {
				t.Fatalf("%s: w[%d]: the incremental pull read %v, a full pull %v", what, i, got["w"][i], w)
			}
		}
	}
	history(full, 1)
	pullBoth(full, "before the restart")

	stop()
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	stop = serve(lis)
	full = newClient(1, false) // a chief that restarted too; the worker stays
	history(full, 100)         // other values, the same versions
	if _, _, err := full.Push(ctx, 1, grad(0)); err != nil {
		t.Fatal(err)
	}
	pullBoth(full, "after the restart")
}
