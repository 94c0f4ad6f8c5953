package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/memnet"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/scenario"
	"github.com/paramserv/paramserv/internal/vfs"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// TestScenarios runs the recovery scripts in testdata/ through the
// project's one scenario driver: whole clusters (every ps and worker of a
// job, the real server, client and trainer) in this process over an
// in-memory network (package memnet), with processes killed and
// restarted, checkpoints damaged and links cut between the steps. They run
// under -short in seconds. The output holds only what does not depend on
// timing (who exited how, whether a line was logged, whether the model is
// right), so the files read as the recovery protocol's specification.
//
//	cluster ps=N workers=M [steps=S] [save_steps=K] [sync] [recovery=D]  a job (linreg, SGD)
//	start ps|worker I            a task starts (again)
//	kill ps|worker I             a task dies at once: its port closes, its connections reset
//	wait step=S                  until ps 0 reports global step >= S
//	wait checkpoint=S            until a complete checkpoint of step >= S is in the checkpoint directory
//	wait exit ps|worker I        until the task ends; prints how
//	wait done                    until every task ends; prints how each ended
//	wait recovering              until every running worker has begun a recovery since the kills before
//	                             it (the chief's checkpoint in flight then, if any, is finished or failed)
//	damage newest                corrupts the newest complete checkpoint's first shard file
//	checkpoints                  whether the newest complete checkpoint is the final step's, and how many were set aside
//	logged TEXT...               whether some task logged a line containing TEXT
//	result                       whether the chief's result has weight ≈ 2 and bias ≈ 10
func TestScenarios(t *testing.T) {
	scenario.Run(t, func() scenario.Runner {
		var cl *memCluster
		return func(t *testing.T, c scenario.Cmd) (string, error) {
			if c.Name != "cluster" && cl == nil {
				t.Fatalf("%s: %s before cluster", c.Where, c.Name)
			}
			switch c.Name {
			case "cluster":
				cl = newMemCluster(t, c)
				return "", nil
			case "start":
				cl.start(t, c.Args[0], int(c.Arg(t, 1)))
				return "", nil
			case "kill":
				cl.kill(c.Args[0], int(c.Arg(t, 1)))
				return "", nil
			case "wait":
				return cl.wait(t, c)
			case "damage":
				return cl.damageNewest(t)
			case "checkpoints":
				return cl.checkpoints(t), nil
			case "logged":
				if cl.logged(strings.Join(c.Args, " ")) {
					return "yes", nil
				}
				return "no", nil
			case "result":
				return cl.result(t), nil
			}
			t.Fatalf("%s: unknown command %q", c.Where, c.Name)
			return "", nil
		}
	})
}

// memCluster is one job's tasks in this process over a memnet.Network.
type memCluster struct {
	net  *memnet.Network
	cfg  Config
	spec cluster.Spec
	dir  string
	res  string

	mu    sync.Mutex // guards logs, tasks and killed
	logs  []string
	tasks map[string]*memTask // "ps 0", "worker 1": the task's latest life
	all   []*memTask
	// killed: a task was killed since the last `wait recovering`.
	killed bool
}

// memTask is one life of a task.
type memTask struct {
	name   string
	cancel context.CancelFunc
	lis    *memnet.Listener // a ps's port
	done   chan struct{}
	err    error
	killed bool
	// recoveries counts a worker's recoveries (Observer.Recovery);
	// sinceKill is their count at the first kill after the last
	// `wait recovering`.
	recoveries atomic.Int64
	sinceKill  int64
}

// recoveryCounter is a worker's Observer for `wait recovering`.
type recoveryCounter struct {
	lifecycle.NopObserver
	n *atomic.Int64
}

func (r recoveryCounter) Recovery(error) { r.n.Add(1) }

func newMemCluster(t *testing.T, c scenario.Cmd) *memCluster {
	nps, nw := int(c.Int(t, "ps", 1)), int(c.Int(t, "workers", 1))
	for _, a := range c.Args {
		if a != "sync" {
			t.Fatalf("%s: cluster: unknown argument %q (a bare word: only sync)", c.Where, a)
		}
	}
	cl := &memCluster{net: memnet.New(), dir: filepath.Join(t.TempDir(), "ckpt"), tasks: map[string]*memTask{}}
	cl.res = filepath.Join(t.TempDir(), "result.json")
	for i := range nps {
		cl.spec.PS = append(cl.spec.PS, fmt.Sprintf("127.0.0.1:%d", 20000+i))
	}
	for i := range nw {
		cl.spec.Workers = append(cl.spec.Workers, fmt.Sprintf("127.0.0.1:%d", 21000+i))
	}
	recovery, err := time.ParseDuration(c.KV["recovery"])
	if err != nil {
		recovery = 20 * time.Second
	}
	cl.cfg = Config{
		Config:          lifecycle.Config{Optimizer: optim.Config{Name: "sgd", LearningRate: 0.01}, Sync: slices.Contains(c.Args, "sync"), StartupTimeout: 30 * time.Second, CheckpointDir: cl.dir, SaveSteps: c.Int(t, "save_steps", 100), SaveEvery: time.Hour, RecoveryTimeout: recovery, WaitLogEvery: 50 * time.Millisecond},
		Model:           "linreg",
		Data:            model.Config{BatchSize: 10, Seed: 7},
		TrainSteps:      c.Int(t, "steps", 600),
		StepsToValidate: 1 << 30,
		ResultFile:      cl.res,
		Dial:            cl.net.Dial,
	}
	t.Cleanup(func() {
		if os.Getenv("PARAMSERV_SCENARIO_LOG") != "" {
			cl.mu.Lock()
			t.Logf("log of %s:\n%s", t.Name(), strings.Join(cl.logs, "\n"))
			cl.mu.Unlock()
		}
		cl.mu.Lock()
		all := slices.Clone(cl.all)
		cl.mu.Unlock()
		for _, tk := range all {
			tk.cancel()
			if tk.lis != nil {
				tk.lis.Kill()
			}
		}
		for _, tk := range all {
			select {
			case <-tk.done:
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not end within 30s of the test's end", tk.name)
			}
		}
	})
	return cl
}

func (cl *memCluster) logf(name string) func(string, ...any) {
	return func(format string, args ...any) {
		cl.mu.Lock()
		cl.logs = append(cl.logs, name+": "+fmt.Sprintf(format, args...))
		cl.mu.Unlock()
	}
}

func (cl *memCluster) start(t *testing.T, job string, i int) {
	name := fmt.Sprintf("%s %d", job, i)
	cfg := cl.cfg
	cfg.Logf = cl.logf(name)
	cfg.Cluster = cluster.Config{Spec: cl.spec, Task: cluster.Task{Job: job, Index: i}}
	ctx, cancel := context.WithCancel(context.Background())
	tk := &memTask{name: name, cancel: cancel, done: make(chan struct{})}
	run := RunWorker
	switch job {
	case "ps":
		ps := psOf(cfg)
		// The ps's port, so that kill closes it as a death does.
		ps.Listen = func(addr string) (net.Listener, error) {
			l, err := cl.net.Listen(addr)
			if err == nil {
				tk.lis = l
			}
			return l, err
		}
		run = func(ctx context.Context, _ Config) error { return RunPS(ctx, ps) }
	case "worker":
		cfg.Observer = recoveryCounter{n: &tk.recoveries}
	default:
		t.Fatalf("start %s: want ps or worker", job)
	}
	cl.mu.Lock()
	cl.tasks[name] = tk
	cl.all = append(cl.all, tk)
	cl.mu.Unlock()
	go func() {
		defer close(tk.done)
		tk.err = run(ctx, cfg)
	}()
}

func (cl *memCluster) task(name string) *memTask {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.tasks[name]
}

func (cl *memCluster) kill(job string, i int) {
	tk := cl.task(fmt.Sprintf("%s %d", job, i))
	if tk == nil {
		return
	}
	cl.mu.Lock()
	if !cl.killed { // before the kill: a worker may notice it at once
		for _, w := range cl.tasks {
			w.sinceKill = w.recoveries.Load()
		}
		cl.killed = true
	}
	cl.mu.Unlock()
	tk.killed = true
	if tk.lis != nil {
		tk.lis.Kill() // connections reset at once, as for kill -9
	}
	tk.cancel()
	<-tk.done
}

func (cl *memCluster) wait(t *testing.T, c scenario.Cmd) (string, error) {
	// A guard against a hang, not a bound on speed: synchronous jobs of
	// thousands of steps under -race on a loaded 2-core machine took 76s
	// from start to end.
	const limit = 3 * time.Minute
	deadline := time.Now().Add(limit)
	switch {
	case c.Has("step"):
		cl.waitAtLeast(t, c, "global step", cl.step, c.Int(t, "step", 0), deadline, limit)
		return "", nil
	case c.Has("checkpoint"):
		cl.waitAtLeast(t, c, "newest complete checkpoint of step", cl.newestCheckpoint, c.Int(t, "checkpoint", 0), deadline, limit)
		return "", nil
	case len(c.Args) == 3 && c.Args[0] == "exit":
		tk := cl.task(c.Args[1] + " " + c.Args[2])
		if tk == nil {
			t.Fatalf("%s: no such task", c.Where)
		}
		return cl.waitTask(t, tk, deadline, limit), nil
	case len(c.Args) == 1 && c.Args[0] == "recovering":
		// A worker reports a recovery only once its loop has returned:
		// the chief's save of that loop has ended, and none comes
		// before its recovery does, which needs the killed ps back. No
		// manifest comes after this (a damage before it could miss the
		// newest checkpoint).
		for {
			var waiting []string
			cl.mu.Lock()
			for n, tk := range cl.tasks {
				select {
				case <-tk.done:
					continue
				default:
				}
				if strings.HasPrefix(n, "worker ") && tk.recoveries.Load() <= tk.sinceKill {
					waiting = append(waiting, n)
				}
			}
			cl.mu.Unlock()
			if len(waiting) == 0 {
				cl.mu.Lock()
				cl.killed = false
				cl.mu.Unlock()
				return "", nil
			}
			if time.Now().After(deadline) {
				slices.Sort(waiting)
				t.Fatalf("%s: %v began no recovery within %s of the last kill\n%s", c.Where, waiting, limit, cl.tail())
			}
			time.Sleep(5 * time.Millisecond)
		}
	case len(c.Args) == 1 && c.Args[0] == "done":
		cl.mu.Lock()
		names := make([]string, 0, len(cl.tasks))
		for n := range cl.tasks {
			names = append(names, n)
		}
		cl.mu.Unlock()
		slices.Sort(names)
		var out []string
		for _, n := range names {
			out = append(out, cl.waitTask(t, cl.task(n), deadline, limit))
		}
		return strings.Join(out, "\n"), nil
	}
	t.Fatalf("%s: wait step=S | wait exit JOB I | wait recovering | wait done", c.Where)
	return "", nil
}

func (cl *memCluster) waitTask(t *testing.T, tk *memTask, deadline time.Time, limit time.Duration) string {
	select {
	case <-tk.done:
	case <-time.After(time.Until(deadline)):
		t.Fatalf("%s did not end within %s\n%s", tk.name, limit, cl.tail())
	}
	var ce *ConfigError
	switch {
	case tk.err == nil:
		return tk.name + ": ok"
	case errors.As(tk.err, &ce):
		return tk.name + ": input to fix: " + firstLine(tk.err)
	}
	return tk.name + ": failed: " + firstLine(tk.err)
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// step asks ps 0 for its global step over the network, as a worker would.
func (cl *memCluster) step() int64 {
	conn, err := grpc.NewClient("passthrough:///"+cl.spec.PS[0], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(cl.net.Dial))
	if err != nil {
		return -1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	st, err := pb.NewParamServerClient(conn).Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return -1
	}
	return st.GlobalStep
}

// tail is the last 60 lines logged, without the ps's repeated "waiting for
// workers" lines, which would hide what the other tasks said.
func (cl *memCluster) tail() string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var keep []string
	for _, l := range cl.logs {
		if !strings.Contains(l, "waiting for workers") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep[max(0, len(keep)-60):], "\n")
}

func (cl *memCluster) logged(text string) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, l := range cl.logs {
		if strings.Contains(l, text) {
			return true
		}
	}
	return false
}

func (cl *memCluster) damageNewest(t *testing.T) (string, error) {
	list, err := checkpoint.List(vfs.OS, cl.dir)
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(list.Entries, func(e checkpoint.Entry) bool { return e.Err == nil })
	if i < 0 {
		return "", fmt.Errorf("no complete checkpoint to damage")
	}
	newest := list.Entries[i]
	file := filepath.Join(cl.dir, newest.Name, "shard-0-of-"+fmt.Sprint(len(cl.spec.PS))+".safetensors")
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return "", err
	}
	return "", nil
}

// waitAtLeast polls what until it is at least want, failing the test at
// the deadline with the log's tail.
func (cl *memCluster) waitAtLeast(t *testing.T, c scenario.Cmd, name string, what func() int64, want int64, deadline time.Time, limit time.Duration) {
	for what() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s %d after %s, want %d\n%s", c.Where, name, what(), limit, want, cl.tail())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newestCheckpoint is the step of the newest complete checkpoint, -1 if
// there is none.
func (cl *memCluster) newestCheckpoint() int64 {
	list, err := checkpoint.List(vfs.OS, cl.dir)
	if err != nil {
		return -1
	}
	newest := int64(-1)
	for _, e := range list.Entries {
		if e.Err == nil && !strings.Contains(e.Name, ".set-aside-") {
			newest = max(newest, e.Step)
		}
	}
	return newest
}

func (cl *memCluster) checkpoints(t *testing.T) string {
	list, err := checkpoint.List(vfs.OS, cl.dir)
	if err != nil {
		return "error: " + err.Error()
	}
	aside, newest := 0, int64(-1)
	for _, e := range list.Entries {
		switch {
		case strings.Contains(e.Name, ".set-aside-"):
			aside++
		case e.Err == nil:
			newest = max(newest, e.Step)
		}
	}
	return fmt.Sprintf("newest complete checkpoint at step %d or later: %v; %d set aside", cl.cfg.TrainSteps, newest >= cl.cfg.TrainSteps, aside)
}

func (cl *memCluster) result(t *testing.T) string {
	b, err := os.ReadFile(cl.res)
	if err != nil {
		return "no result: " + err.Error()
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return "bad result: " + err.Error()
	}
	ok := r.Weight != nil && r.Bias != nil && math.Abs(*r.Weight-2) < 0.1 && math.Abs(*r.Bias-10) < 0.5
	return fmt.Sprintf("reached step %d: %v; weight ≈ 2 and bias ≈ 10: %v", cl.cfg.TrainSteps, r.GlobalStep >= cl.cfg.TrainSteps, ok)
}
