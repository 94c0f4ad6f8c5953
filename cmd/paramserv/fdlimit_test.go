package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// Failure 12 of issue 12: a ps whose open-file limit is reached by idle
// connections (none of them a worker) keeps serving its worker: the accept
// loop backs off, closes the oldest idle connections that have not said
// what they are, and logs the condition once, where it used to stop the
// gRPC server and exit. The ps runs under an open-file limit of 256
// (prlimit on its pid) and gets 400 idle connections, all kept open while
// a worker's client does Init, Push, Pull (data path and gRPC) and Done.
func TestOpenFileLimitReachedByIdleConnections(t *testing.T) {
	const limit, idle = 256, 400
	hosts := freeHosts(t, 2)
	ps := start(t, "ps0", nil, clusterArgs(hosts[:1], hosts[1:], "ps", 0)...)
	lim := unix.Rlimit{Cur: limit, Max: limit}
	if err := unix.Prlimit(ps.cmd.Process.Pid, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatalf("prlimit --nofile=%d on the ps: %v", limit, err)
	}
	ps.waitFor(t, "serving on", 30*time.Second)

	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range idle {
		c, err := net.DialTimeout("tcp", hosts[0], 10*time.Second)
		if err != nil {
			t.Fatalf("idle connection %d of %d to the ps at %s: %v", i, idle, hosts[0], err)
		}
		conns = append(conns, c)
	}
	const logged = "too many open files"
	ps.waitFor(t, logged, 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vars := []model.Variable{{Name: "w", Shape: []int{3}}}
	for _, grpcOnly := range []bool{false, true} {
		c, err := client.New(hosts[:1], vars, client.Options{GRPCOnly: grpcOnly})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.WaitReady(ctx, false); err != nil {
			t.Fatalf("gRPC only %v: waiting for the ps with %d idle connections open: %v", grpcOnly, idle, err)
		}
		if _, err := c.Init(ctx, model.Params{"w": {1, 2, 3}}, client.InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 0.5}, NumWorkers: 1}); err != nil {
			t.Fatalf("gRPC only %v: Init with %d idle connections open: %v", grpcOnly, idle, err)
		}
		if _, _, err := c.Push(ctx, 0, model.Params{"w": {2, 2, 2}}); err != nil {
			t.Fatalf("gRPC only %v: Push with %d idle connections open: %v", grpcOnly, idle, err)
		}
		got := model.NewParams(vars)
		if _, err := c.Pull(ctx, 0, got); err != nil {
			t.Fatalf("gRPC only %v: Pull with %d idle connections open: %v", grpcOnly, idle, err)
		}
		if len(got["w"]) != 3 {
			t.Fatalf("pulled %v", got)
		}
	}
	// Two pushes of 2 at a rate of 0.5 moved w by -2.
	c, err := client.New(hosts[:1], vars, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := model.NewParams(vars)
	if _, err := c.Pull(ctx, 0, got); err != nil {
		t.Fatal(err)
	}
	if w := got["w"]; w[0] != -1 || w[1] != 0 || w[2] != 1 {
		t.Fatalf("w = %v after two pushes, want [-1 0 1]", w)
	}
	if err := c.Done(ctx); err != nil {
		t.Fatalf("Done: %v", err)
	}
	if code := ps.wait(t, time.Minute); code != 0 {
		t.Fatalf("ps exited %d after its worker's Done, want 0", code)
	}
	if n := strings.Count(ps.output(), logged); n != 1 {
		t.Fatalf("the ps logged %q %d times, want once per burst:\n%s", logged, n, ps.output())
	}
}
