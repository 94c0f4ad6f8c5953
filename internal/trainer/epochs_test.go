package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// stepCounter is an Observer that keeps each worker's last local step.
type stepCounter struct {
	lifecycle.NopObserver
	mu    sync.Mutex
	local map[int]int64
}

func (s *stepCounter) Step(st StepStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.local == nil {
		s.local = make(map[int]int64)
	}
	s.local[st.Worker] = st.LocalStep
}

func (s *stepCounter) of(w int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.local[w]
}

// writeLibSVM writes rows rows of a small libsvm file to dir/name.
func writeLibSVM(t *testing.T, dir, name string, rows int) string {
	t.Helper()
	var b strings.Builder
	for i := range rows {
		fmt.Fprintf(&b, "%s %d:1 %d:0.5\n", []string{"-1", "+1"}[i/2%2], i%40+1, 41+i%7) // both labels in every line split
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// epochsJob runs 1 ps and 2 workers of sparse_lr with --epochs=1 on
// loopback, --train_steps far away, and returns the chief's result, the
// workers' local steps and the log.
func epochsJob(t *testing.T, base Config, psSet ...func(*PSConfig)) (Result, [2]int64, *logBuf) {
	t.Helper()
	counter := &stepCounter{}
	base.Model = "sparse_lr"
	base.Data.BatchSize, base.Data.Seed, base.Data.InputFormat, base.Data.Epochs = 10, 1, "libsvm", 1
	base.Optimizer = optim.Config{Name: "ftrl", LearningRate: 0.1}
	base.TrainSteps = 1_000_000
	base.Observer = counter
	base.ResultFile = filepath.Join(t.TempDir(), "result.json")
	base.WaitLogEvery = 100 * time.Millisecond
	tc := newTestCluster(t, 1, 2, base)
	for _, set := range psSet {
		tc.psSet = set
	}
	p := tc.startPS(0)
	errs := tc.runWorkers(withDeadline(t, time.Minute))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("ps: %v", p.err)
		}
	case <-withDeadline(t, 30*time.Second).Done():
		t.Fatal("the ps did not exit within 30s of its workers' end")
	}
	return readResultFile(t, base.ResultFile), [2]int64{counter.of(0), counter.of(1)}, tc.log
}

// Asynchronous, --epochs=1: 101 rows split by line over 2 workers are
// parts of 51 and 50 rows, batches of 10: the workers make exactly 6 and 5
// steps, loaded or streamed, and the chief evaluates after both, at global
// step 11.
func TestEpochsAsync(t *testing.T) {
	for _, buffer := range []int{0, 16} {
		t.Run(fmt.Sprintf("shuffle_buffer=%d", buffer), func(t *testing.T) {
			var cfg Config
			cfg.Data.TrainData = writeLibSVM(t, t.TempDir(), "train.svm", 101)
			cfg.Data.ShuffleBuffer = buffer
			r, local, log := epochsJob(t, cfg)
			if local != [2]int64{6, 5} || r.LocalSteps != 6 || r.GlobalStep != 11 {
				t.Fatalf("local steps %v (chief's result: %d), global step %d: want [6 5], 6, 11", local, r.LocalSteps, r.GlobalStep)
			}
			if n := log.count("end of data after 1 epochs"); n != 2 {
				t.Fatalf("%d lines say the data ended, want one of each worker", n)
			}
			if r.Metrics["train_examples"] != 51 {
				t.Fatalf("chief scored %v rows of its part, want 51", r.Metrics["train_examples"])
			}
		})
	}
}

// With checkpoints a worker at the goal waits for the chief (it may have
// to train again); one whose data ended has nothing to train again. A
// non-chief that ends first leaves at once and is not sent back to
// training; a chief that ends first waits for the others before it
// evaluates, so its result holds every step.
func TestEpochsOneWorkerEndsFirst(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rows  [2]int // the parts of workers 0 and 1 (one file each)
		steps [2]int64
	}{
		{"non-chief first", [2]int{200, 20}, [2]int64{20, 2}},
		{"chief first", [2]int{20, 200}, [2]int64{2, 20}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var cfg Config
			cfg.Data.TrainData = writeLibSVM(t, dir, "a.svm", tt.rows[0]) + "," + writeLibSVM(t, dir, "b.svm", tt.rows[1])
			cfg.CheckpointDir = filepath.Join(dir, "ckpt")
			r, local, log := epochsJob(t, cfg)
			if local != tt.steps || r.GlobalStep != tt.steps[0]+tt.steps[1] {
				t.Fatalf("local steps %v, global step %d: want %v, %d", local, r.GlobalStep, tt.steps, tt.steps[0]+tt.steps[1])
			}
			if n := log.count("end of data"); n != 2 || log.count("training again") > 0 {
				t.Fatalf("%d lines say the data ended (want 2), %d that a worker trains again (want 0)", n, log.count("training again"))
			}
		})
	}
}

// Synchronous: a worker whose data ends stops pushing, so the steps the
// other still pushes complete only when the ps proceed without it. Without
// --sync_on_timeout=proceed the job is refused as an input to fix; with it,
// parts of 6 and 5 batches end at global step 6, the last one proceeding
// after --sync_timeout.
func TestEpochsSync(t *testing.T) {
	t.Run("refused without proceed", func(t *testing.T) {
		cfg := Config{Config: lifecycle.Config{Sync: true, StartupTimeout: time.Second}, Model: "sparse_lr", TrainSteps: 10} // no ps there
		cfg.Data = model.Config{BatchSize: 10, Epochs: 1, TrainData: writeLibSVM(t, t.TempDir(), "train.svm", 101)}
		cfg.Cluster.Spec.PS = []string{"127.0.0.1:1"}
		cfg.Cluster.Spec.Workers = []string{"127.0.0.1:2", "127.0.0.1:3"}
		cfg.Cluster.Task.Job = "worker"
		err := RunWorker(context.Background(), cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "--sync_on_timeout=proceed") {
			t.Fatalf("RunWorker: %v, want a ConfigError naming --sync_on_timeout=proceed", err)
		}
	})
	t.Run("proceed", func(t *testing.T) {
		var cfg Config
		cfg.Data.TrainData = writeLibSVM(t, t.TempDir(), "train.svm", 101)
		cfg.Sync, cfg.SyncProceed, cfg.SyncTimeout = true, true, 300*time.Millisecond
		r, local, _ := epochsJob(t, cfg)
		if local != [2]int64{6, 5} || r.GlobalStep != 6 || r.Mode != "sync" {
			t.Fatalf("local steps %v, global step %d, mode %s: want [6 5], 6, sync", local, r.GlobalStep, r.Mode)
		}
	})
}
