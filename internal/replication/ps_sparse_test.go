package replication

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/local"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/vfs"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// startReplicatedLogged starts numPS replicated ps (--replicas=2, the
// given failover timeout and checkpoint directory) in this process, each
// logging to its own buffer, and returns the cluster, the worker's
// dialler and the logs.
func startReplicatedLogged(t *testing.T, numPS int, timeout time.Duration, dir string) (cluster.Spec, Options, func(context.Context, string) (net.Conn, error), []*logBuf) {
	const replicas = 2
	n := numPS + 1 + numPS*replicas
	ports, err := local.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	var spec cluster.Spec
	for i := range numPS {
		spec.PS = append(spec.PS, addr(i))
	}
	spec.Workers = []string{addr(numPS)}
	rep := Options{Replicas: replicas, FailoverTimeout: timeout}
	for i := numPS + 1; i < n; i++ {
		rep.Hosts = append(rep.Hosts, addr(i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, numPS)
	t.Cleanup(func() {
		cancel()
		for range numPS {
			<-done
		}
	})
	logs := make([]*logBuf, numPS)
	for i := range numPS {
		logs[i] = &logBuf{}
		cfg := PSConfig{Options: rep, StartupTimeout: time.Minute, CheckpointDir: dir, Logf: logs[i].logf("")}
		cfg.Cluster = cluster.Config{Spec: spec, Task: cluster.Task{Job: "ps", Index: i}}
		go func() { done <- RunPS(ctx, cfg) }()
	}
	deadline := time.Now().Add(time.Minute)
	for _, a := range spec.PS {
		for {
			conn, err := net.DialTimeout("tcp", a, time.Second)
			if err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("ps at %s does not listen after a minute: %v", a, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wcfg := WorkerConfig{Options: rep, Cluster: cluster.Config{Spec: spec, Task: cluster.Task{Job: "worker", Index: 0}}}
	return spec, rep, wcfg.Dialer(), logs
}

// Sparse rows through replicated shards (the data path): a first pull
// counts the keys for admission (--min_count=2) through the shard's log,
// so the push after it admits them and updates their rows, exactly as
// without replicas. A Restore sent to a shard's primary goes through the
// log, so every copy restores (each ps logs a restore for both shards it
// holds), and one sent to a copy that does not serve is refused.
func TestReplicatedSparseRowsAndRestore(t *testing.T) {
	dir := t.TempDir()
	spec, rep, dial, logs := startReplicatedLogged(t, 3, time.Second, dir)
	ctx := withDeadline(t, time.Minute)
	vars := []model.Variable{{Name: "b", Shape: []int{1}}}
	tables := []model.Table{{Name: "w", Dim: 1, MinCount: 2}}
	c, err := client.New(spec.PS, vars, client.Options{Worker: 0, Dial: dial, Tables: tables})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	step, err := c.Init(ctx, model.NewParams(vars), client.InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]uint64, 30) // spread over the three ps
	for i := range keys {
		keys[i] = uint64(i)
	}
	ones := make([]float32, len(keys))
	for i := range ones {
		ones[i] = 1
	}
	pull := func(push bool) []float32 {
		t.Helper()
		vals := make([]float32, len(keys))
		req := &client.Request{Pull: true, MinStep: step, SparseParams: []client.Rows{{Table: "w", Keys: keys, Values: vals}}}
		if push {
			req.Push, req.Step = true, step
			req.Grads = model.NewParams(vars)
			req.SparseGrads = []client.Rows{{Table: "w", Keys: keys, Values: ones}}
		}
		call := c.Do(ctx, req)
		if call.Err != nil {
			t.Fatal(call.Err)
		}
		step = call.Step
		return vals
	}
	want := func(when string, got []float32, v float32) {
		t.Helper()
		for i, x := range got {
			if x != v {
				t.Fatalf("%s: row %d = %v, want %v (all: %v)", when, keys[i], x, v, got)
			}
		}
	}
	want("first pull (keys seen once)", pull(false), 0)
	// Without the first pull counted on every copy's log, the push would
	// see each key for the first time and drop its gradient.
	want("after a push (keys seen twice: admitted)", pull(true), -1)
	saved := step
	saveCheckpoint(t, ctx, c, dir, step, tables[0])
	want("after a second push", pull(true), -2)

	if err := c.Restore(ctx, dir, saved, []int{0, 1, 2}); err != nil {
		t.Fatalf("%v\nps 0:\n%s\nps 1:\n%s\nps 2:\n%s", err, logs[0], logs[1], logs[2])
	}
	step = saved // the global step went back to the checkpoint's
	want("after the restore", pull(false), -1)
	line := fmt.Sprintf("restored checkpoint of step %d from", saved)
	for p, l := range logs {
		// A backup holds the entry before the primary answers, and
		// applies it on its own time after.
		for deadline := time.Now().Add(30 * time.Second); l.count(line) < 2; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("ps %d logged %d restores of step %d after 30s, want one for each of its 2 copies:\n%s", p, l.count(line), saved, l)
			}
		}
	}
	// A copy that does not serve its shard refuses a Restore (after
	// waiting three failover timeouts, 3 s, for a takeover).
	conn, err := grpc.NewClient(rep.copyAddr(1, 0, 3), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = pb.NewParamServerClient(conn).Restore(ctx, &pb.RestoreRequest{Dir: dir, Step: saved})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Restore at ps 1's copy of shard 0: %v, want Unavailable (its primary is ps 0)", err)
	}
}

// A worker that reached a copy whose primary lives (at start, a dial that
// came before the primary listened) and whose calls give up before the
// copy's three failover timeouts (the start-up status probe) is sent back
// all the same: the copy drops the connection, so the worker dials again
// (and its dialler tries the primary first). Before, with the default
// --failover_timeout=1s, such a worker probed the copy forever.
func TestCopyDropsCallerThatGaveUp(t *testing.T) {
	_, rep, _, _ := startReplicatedLogged(t, 3, time.Second, "")
	ctx := withDeadline(t, 20*time.Second)
	var mu sync.Mutex
	dials := 0
	conn, err := grpc.NewClient(rep.copyAddr(1, 0, 3), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			mu.Lock()
			dials++
			mu.Unlock()
			var d net.Dialer
			return d.DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ps := pb.NewParamServerClient(conn)
	for {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // < 3 x 1s
		_, err := ps.Status(cctx, &pb.StatusRequest{})
		cancel()
		if err == nil {
			t.Fatal("ps 1's copy of shard 0 answered Status while ps 0 serves it")
		}
		mu.Lock()
		n := dials
		mu.Unlock()
		if n >= 2 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the copy never dropped the connection of a caller that gave up (%d dials in 20s)", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// saveCheckpoint saves the checkpoint of step in dir as a chief does
// (trainer's saver, for an asynchronous job with sgd): every primary
// writes its shard, then the manifest names them.
func saveCheckpoint(t *testing.T, ctx context.Context, c *client.Client, dir string, step int64, table model.Table) {
	t.Helper()
	infos, err := c.CheckpointShards(ctx, dir, step)
	if err != nil {
		t.Fatal(err)
	}
	opt := optim.Config{Name: "sgd", LearningRate: 1}
	rule, err := optim.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	slots := shard.SlotNames(rule.Name(), rule.StateSlots())
	m := checkpoint.Manifest{Step: step, Time: time.Now().UTC(), NumPS: c.NumPS(), NumWorkers: 1, Shards: infos}
	for _, v := range c.Plan().Vars {
		vi := checkpoint.VariableInfo{Name: v.Name, Slots: slots}
		for _, d := range v.Shape {
			vi.Shape = append(vi.Shape, int64(d))
		}
		for _, p := range v.Parts {
			vi.Parts = append(vi.Parts, checkpoint.Part{Shard: p.PS})
		}
		m.Variables = append(m.Variables, vi)
	}
	ti := checkpoint.TableInfo{Name: table.Name, Dim: int64(table.Dim), Slots: slots}
	for k := range c.NumPS() {
		ti.Shards = append(ti.Shards, k)
	}
	m.Tables = append(m.Tables, ti)
	tr := checkpoint.Training{Mode: "async", Optimizer: opt, Tables: []checkpoint.TableSpec{{Name: table.Name, Dim: int32(table.Dim), Initializer: table.Init,
		InitStddev: table.InitStddev, Seed: table.Seed, MinCount: table.MinCount, EvictAfterSteps: table.EvictAfterSteps}}}
	if err := m.SetTraining(tr); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.WriteManifest(vfs.OS, dir, m); err != nil {
		t.Fatal(err)
	}
}
