package replication

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/local"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
)

// BenchmarkReplicatedDensePushPull is a dense 16 MiB push+pull (one
// worker; 3 ps on loopback in this process, the variable split across
// them; sgd) with --replicas=1 and --replicas=2: what replicating every
// push costs the worker's round trip (docs/REPLICATION.md). Compare the
// two in one run:
//
//	go test -run '^$' -bench ReplicatedDense -count 5 ./internal/replication
func BenchmarkReplicatedDensePushPull(b *testing.B) {
	for _, r := range []int{1, 2} {
		b.Run(fmt.Sprintf("replicas=%d", r), func(b *testing.B) { benchReplicated(b, 3, r, 16<<20) })
	}
}

func benchReplicated(b *testing.B, numPS, replicas int, bytes int) {
	spec, dial := startReplicated(b, numPS, replicas)
	ctx := context.Background()
	vars := []model.Variable{{Name: "w", Shape: []int{bytes / 4}}}
	c, err := client.New(spec.PS, vars, client.Options{Worker: 0, SplitBytes: 1, Dial: dial})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WaitReady(ctx, false); err != nil {
		b.Fatal(err)
	}
	params, grads := model.NewParams(vars), model.NewParams(vars)
	for i := range grads["w"] {
		grads["w"][i] = 1
	}
	step, err := c.Init(ctx, params, client.InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1})
	if err != nil {
		b.Fatal(err)
	}
	for range 3 { // warm up: connections, buffers
		if step, _, err = c.PushPull(ctx, step, grads, 0, params); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(2 * int64(bytes))
	b.ResetTimer()
	for b.Loop() {
		if step, _, err = c.PushPull(ctx, step, grads, 0, params); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if got, want := params["w"][0], -float32(step); got != want {
		b.Fatalf("after %d pushes w[0] = %v, want %v", step, got, want)
	}
}

// startReplicated starts numPS ps with --replicas=replicas in this process
// on loopback, waits until every primary listens, and returns the cluster
// and worker 0's dialler (nil without replicas); the ps stop at the end of
// tb.
func startReplicated(tb testing.TB, numPS, replicas int) (cluster.Spec, func(context.Context, string) (net.Conn, error)) {
	n := numPS + 1
	if replicas > 1 {
		n += numPS * replicas
	}
	ports, err := local.FreePorts(n)
	if err != nil {
		tb.Fatal(err)
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	var spec cluster.Spec
	for i := range numPS {
		spec.PS = append(spec.PS, addr(i))
	}
	spec.Workers = []string{addr(numPS)}
	rep := Options{Replicas: replicas, FailoverTimeout: time.Second}
	if replicas > 1 {
		for i := numPS + 1; i < n; i++ {
			rep.Hosts = append(rep.Hosts, addr(i))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, numPS)
	tb.Cleanup(func() {
		cancel()
		for range numPS {
			<-done
		}
	})
	for i := range numPS {
		if replicas == 1 { // a ps without replicas
			s := server.New(server.Config{Task: i, NumPS: numPS, NumWorkers: len(spec.Workers)})
			go func() { done <- server.Serve(ctx, spec.PS[i], s) }()
			continue
		}
		cfg := PSConfig{Options: rep, StartupTimeout: time.Minute}
		cfg.Cluster = cluster.Config{Spec: spec, Task: cluster.Task{Job: "ps", Index: i}}
		go func() { done <- RunPS(ctx, cfg) }()
	}
	// Every primary listens before the worker dials, so that it does not
	// start on a copy (which would send it back after three timeouts).
	deadline := time.Now().Add(time.Minute)
	for _, a := range spec.PS {
		for {
			conn, err := net.DialTimeout("tcp", a, time.Second)
			if err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("ps at %s does not listen after a minute: %v", a, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if replicas == 1 {
		return spec, nil
	}
	wcfg := WorkerConfig{Options: rep, Cluster: cluster.Config{Spec: spec, Task: cluster.Task{Job: "worker", Index: 0}}}
	return spec, wcfg.Dialer()
}
