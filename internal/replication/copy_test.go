package replication

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/memnet"
	"github.com/paramserv/paramserv/internal/replica"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// A push computed against another incarnation of the shard (a step of the
// history before the cluster re-formed from a checkpoint, sent again after
// it) is answered dropped, with the copy's incarnation, and not logged: its
// request id (worker, its step + 1) would stand above the ids of this
// history's pushes, whose steps start again from the checkpoint's, and they
// would all be taken for retries of it and never applied (a worker in
// TestReplicasTwoKilledFallBack saw the checkpoint's step + 1 for ever).
func TestPushOfAnotherIncarnationNotLogged(t *testing.T) {
	c := startCopy(t)
	ctx := withDeadline(t, time.Minute)
	init := &pb.InitRequest{Vars: []*pb.VarSpec{{Name: "w", Shape: []int64{1}, Init: wire.Float32Bytes([]float32{0})}},
		Optimizer: &pb.OptimizerConfig{Name: "sgd", LearningRate: 1}, NumWorkers: 1, GlobalStep: 200}
	if _, err := c.Init(ctx, init); err != nil {
		t.Fatal(err)
	}
	inc := c.Server.Incarnation()
	push := func(step int64, inc uint64) *pb.PushResponse {
		t.Helper()
		r, err := c.Push(ctx, &pb.PushRequest{Step: step, Incarnation: inc, Grads: []*pb.DenseTensor{{Name: "w", Data: wire.Float32Bytes([]float32{1})}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Step 278 of the lost history, computed against another incarnation.
	if r := push(278, inc+1); !r.Dropped || r.GlobalStep != 200 || r.Incarnation != inc {
		t.Errorf("a push of another incarnation: answered %v, want dropped at step 200 with incarnation %d", r, inc)
	}
	// The worker recovered: its pushes from the checkpoint's step on are
	// new ones, each applied once.
	for step := int64(200); step < 203; step++ {
		if r := push(step, inc); r.Dropped || r.GlobalStep != step+1 {
			t.Fatalf("push of step %d: answered %v, want applied (global step %d)", step, r, step+1)
		}
	}
	// A push of no known incarnation (a worker's first) is taken as before.
	if r := push(203, 0); r.Dropped || r.GlobalStep != 204 {
		t.Fatalf("push of step 203 naming no incarnation: answered %v, want applied", r)
	}
}

// startCopy is a copy of shard 0 on a cluster of one ps (one copy), its
// log driven by a Host over memnet.
func startCopy(t *testing.T) *shardCopy {
	t.Helper()
	timeout := time.Second
	c := newShardCopy(0, 0, timeout)
	c.Server = server.New(server.Config{Task: 0, NumPS: 1, NumWorkers: 1, Replicated: c, Aggregated: c.aggregated, Logf: func(string, ...any) {}})
	c.fsm = server.NewFSM(c.Server, 0)
	c.logf = func(string, ...any) {}
	c.applier = newApplier(c.apply)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.applier.run(stop)
	}()
	mn := memnet.New()
	l, err := mn.Listen("ps0:7000")
	if err != nil {
		t.Fatal(err)
	}
	h, err := Start(HostConfig{
		Config: replica.Config{ID: 0, N: 1, R: 1, Timeout: timeout},
		Addrs:  []string{l.Addr().String()}, Listener: l,
		Dial:  func(ctx context.Context, addr string) (net.Conn, error) { return mn.Dial(ctx, addr) },
		Apply: func(e replica.Entry) { c.applier.add(e) },
		Logf:  func(string, ...any) {},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.host = h
	t.Cleanup(func() {
		h.Close()
		close(stop)
		<-done
	})
	return c
}
