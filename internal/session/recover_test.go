package session

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/memnet"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/replication"
	"github.com/paramserv/paramserv/internal/trainer"
)

// A program's own loop recovers as the built-in one does: the chief's
// session saves checkpoints; the ps dies and restarts (over the in-memory
// network, its connections reset as by kill -9), restores the newest
// checkpoint, and the next exchange recovers and pulls exactly the
// checkpointed values, at the checkpoint's step; training goes on and
// Done saves the final checkpoint and ends the ps.
func TestSessionRecoversFromAPSRestart(t *testing.T) {
	nw := memnet.New()
	spec := cluster.Spec{PS: []string{"127.0.0.1:30000"}, Workers: []string{"127.0.0.1:30001"}}
	dir := filepath.Join(t.TempDir(), "ckpt")
	startPS := func() (*memnet.Listener, context.CancelFunc, chan error) {
		var lis *memnet.Listener
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		ready := make(chan struct{})
		go func() {
			errc <- trainer.RunPS(ctx, trainer.PSConfig{PSConfig: replication.PSConfig{
				Cluster:       cluster.Config{Spec: spec, Task: cluster.Task{Job: "ps", Index: 0}},
				CheckpointDir: dir, WaitLogEvery: 50 * time.Millisecond,
				Listen: func(addr string) (net.Listener, error) {
					l, err := nw.Listen(addr)
					lis = l
					close(ready)
					return l, err
				},
			}})
		}()
		<-ready
		return lis, cancel, errc
	}
	lis, cancel, _ := startPS()

	vars := []model.Variable{{Name: "w", Shape: []int{2}}}
	s, err := Start(testCtx(t), Config{
		Config: lifecycle.Config{
			Cluster:         cluster.Config{Spec: spec, Task: cluster.Task{Job: "worker", Index: 0}},
			Optimizer:       optim.Config{Name: "sgd", LearningRate: 0.5},
			Sync:            true,
			CheckpointDir:   dir,
			SaveSteps:       10,
			WaitLogEvery:    50 * time.Millisecond,
			RecoveryTimeout: 30 * time.Second,
			Logf:            t.Logf,
		},
		Variables: vars,
		Dial:      nw.Dial,
	}, model.Params{"w": {0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	params, grads := model.NewParams(vars), model.Params{"w": {1, -1}}
	if _, err := s.Pull(testCtx(t), params); err != nil {
		t.Fatal(err)
	}
	for s.Step() < 25 {
		if _, err := s.PushPull(testCtx(t), grads, params); err != nil {
			t.Fatal(err)
		}
	}
	// The ps dies at step 25 and comes back; the newest checkpoint is of
	// step 20, where w = -0.5 * 20 * (1, -1).
	lis.Kill()
	cancel()
	_, cancel, errc := startPS()
	defer cancel()
	step, err := s.PushPull(testCtx(t), grads, params)
	if err != nil {
		t.Fatalf("the exchange after the ps restarted: %v", err)
	}
	if step != 20 || params["w"][0] != -10 || params["w"][1] != 10 {
		t.Fatalf("after recovery: step %d, w %v; want step 20, w [-10 10] (the checkpoint's)", step, params["w"])
	}
	for s.Step() < 30 {
		if _, err := s.PushPull(testCtx(t), grads, params); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Done(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("the restarted ps: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the restarted ps did not exit within a minute of the worker's Done")
	}
	if _, err := os.Stat(filepath.Join(dir, "ckpt-30", "manifest.json")); err != nil {
		t.Fatalf("the final checkpoint: %v", err)
	}
}
