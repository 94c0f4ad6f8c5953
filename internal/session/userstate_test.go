package session

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/memnet"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/replication"
	"github.com/paramserv/paramserv/internal/trainer"
	"github.com/paramserv/paramserv/internal/vfs"
)

// The chief's state of its own is saved with each checkpoint and read
// back from the checkpoint a restarted ps restored.
func TestStateSavedWithCheckpoints(t *testing.T) {
	nw := memnet.New()
	spec := cluster.Spec{PS: []string{"127.0.0.1:30000"}, Workers: []string{"127.0.0.1:30001"}}
	dir := filepath.Join(t.TempDir(), "ckpt")
	runPS := func() (*memnet.Listener, context.CancelFunc) {
		var lis *memnet.Listener
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = trainer.RunPS(ctx, trainer.PSConfig{PSConfig: replication.PSConfig{
				Cluster:       cluster.Config{Spec: spec, Task: cluster.Task{Job: "ps", Index: 0}},
				CheckpointDir: dir, WaitLogEvery: time.Hour,
				Listen: func(addr string) (net.Listener, error) {
					l, err := nw.Listen(addr)
					lis = l
					close(ready)
					return l, err
				},
			}})
		}()
		<-ready
		return lis, func() { cancel(); <-done }
	}
	lis, stop := runPS()
	vars := []model.Variable{{Name: "w", Shape: []int{2}}}
	cfg := Config{
		Config: lifecycle.Config{
			Cluster:         cluster.Config{Spec: spec, Task: cluster.Task{Job: "worker", Index: 0}},
			Optimizer:       optim.Config{Name: "sgd", LearningRate: 0.5},
			CheckpointDir:   dir,
			SaveSteps:       3,
			RecoveryTimeout: 30 * time.Second,
			Logf:            t.Logf,
		},
		Variables: vars,
		Dial:      nw.Dial,
	}
	s, err := Start(testCtx(t), cfg, model.Params{"w": {0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	s.DeferSaves()
	if b, step, err := s.ResumeState(testCtx(t)); b != nil || step != -1 || err != nil {
		t.Fatalf("a fresh job's resume state: %q, step %d, %v", b, step, err)
	}
	params, grads := model.NewParams(vars), model.Params{"w": {1, -1}}
	var saved []int64
	for s.Step() < 7 {
		if _, err := s.PushPull(testCtx(t), grads, params); err != nil {
			t.Fatal(err)
		}
		if s.SaveDue() {
			saved = append(saved, s.Step())
			if err := s.Save(testCtx(t), []byte(fmt.Sprintf("state at %d", s.Step()))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !slices.Equal(saved, []int64{3, 6}) {
		t.Fatalf("saves due at %v, want [3 6]", saved)
	}
	for _, step := range saved {
		b, err := checkpoint.ReadUserState(vfs.OS, dir, step)
		if err != nil || string(b) != fmt.Sprintf("state at %d", step) {
			t.Fatalf("state of checkpoint %d: %q, %v", step, b, err)
		}
	}
	// The ps dies and restores the checkpoint of step 6: its state is
	// the one handed back.
	lis.Kill()
	stop()
	_, stop = runPS()
	defer stop()
	if _, err := s.Pull(testCtx(t), params); err != nil {
		t.Fatal(err)
	}
	b, step, err := s.ResumeState(testCtx(t))
	if err != nil || step != 6 || string(b) != "state at 6" {
		t.Fatalf("resume state: %q, step %d, %v; want \"state at 6\" of step 6", b, step, err)
	}
	if _, err := s.PushPull(testCtx(t), grads, params); err != nil {
		t.Fatal(err)
	}
	s.SetFinalState([]byte("final"))
	if err := s.Done(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if b, err := checkpoint.ReadUserState(vfs.OS, dir, s.Step()); err != nil || string(b) != "final" {
		t.Fatalf("the final checkpoint's state: %q, %v", b, err)
	}
}
