package server_test

// Training modes end to end through the exported API only: in-process ps on
// loopback listeners (server.ServeListener) driven by the client package,
// on the data path and on gRPC.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"testing"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
)

// startPS serves n in-process ps on loopback until the test ends.
func startPS(t testing.TB, n, workers int) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var addrs []string
	for task := range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, lis.Addr().String())
		s := server.New(server.Config{Task: task, NumPS: n, NumWorkers: workers})
		wg.Go(func() {
			if err := server.ServeListener(ctx, lis, s); err != nil {
				t.Errorf("ps %d: %v", task, err)
			}
		})
	}
	return addrs
}

func newClient(t *testing.T, addrs []string, worker int, vars []model.Variable, tables []model.Table, grpcOnly bool) *client.Client {
	t.Helper()
	c, err := client.New(addrs, vars, client.Options{Worker: worker, Tables: tables, GRPCOnly: grpcOnly})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.WaitReady(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	return c
}

func path(grpcOnly bool) string {
	if grpcOnly {
		return "grpc"
	}
	return "datapath"
}

// Bounded staleness: in asynchronous mode with MaxStaleness 2, a push whose
// step lags the global step by more than 2 is dropped (the caller is told,
// the weights do not move) and counted in Status; one that lags by exactly
// 2 is applied.
func TestBoundedStalenessDropsAndCounts(t *testing.T) {
	for _, grpcOnly := range []bool{false, true} {
		t.Run(path(grpcOnly), func(t *testing.T) {
			addrs := startPS(t, 2, 2)
			vars := []model.Variable{{Name: "w", Shape: []int{2}}, {Name: "b", Shape: []int{1}}}
			tables := []model.Table{{Name: "emb", Dim: 2}}
			c := newClient(t, addrs, 0, vars, tables, grpcOnly)
			ctx := context.Background()
			if _, err := c.Init(ctx, model.Params{"w": {1, 2}, "b": {0}}, client.InitOptions{
				Optimizer: optim.Config{Name: "sgd", LearningRate: 0.5}, NumWorkers: 2, MaxStaleness: 2,
			}); err != nil {
				t.Fatal(err)
			}
			keys := []uint64{3, 4, 7, 100}
			push := func(step int64) (int64, bool) {
				t.Helper()
				call := c.Do(ctx, &client.Request{Push: true, Step: step,
					Grads:       model.Params{"w": {1, 1}, "b": {1}},
					SparseGrads: []client.Rows{{Table: "emb", Keys: keys, Values: []float32{1, 1, 1, 1, 1, 1, 1, 1}}},
				})
				if call.Err != nil {
					t.Fatalf("push at step %d: %v", step, call.Err)
				}
				return call.Step, call.Dropped
			}
			// Five fresh pushes take the global step to 5.
			for step := range int64(5) {
				if _, dropped := push(step); dropped {
					t.Fatalf("push at step %d (global step %d) dropped", step, step)
				}
			}
			for _, tc := range []struct {
				step        int64
				wantDropped bool
			}{
				{2, true},  // 5 - 2 = 3 > 2
				{0, true},  // 5 behind
				{3, false}, // 5 - 3 = 2: applied, global step 6
				{3, true},  // 6 - 3 = 3 > 2
				{4, false}, // 6 - 4 = 2: global step 7
			} {
				if _, dropped := push(tc.step); dropped != tc.wantDropped {
					t.Fatalf("push at step %d: dropped %v, want %v", tc.step, dropped, tc.wantDropped)
				}
			}
			// Seven applied pushes of 1 at a rate of 0.5.
			params := model.NewParams(vars)
			rows := make([]float32, 2*len(keys))
			call := c.Do(ctx, &client.Request{Pull: true, Params: params, SparseParams: []client.Rows{{Table: "emb", Keys: keys, Values: rows}}})
			if call.Err != nil {
				t.Fatal(call.Err)
			}
			if call.Step != 7 {
				t.Fatalf("global step %d, want 7 (seven pushes applied)", call.Step)
			}
			if w, b := params["w"], params["b"]; w[0] != -2.5 || w[1] != -1.5 || b[0] != -3.5 {
				t.Fatalf("w = %v, b = %v; want [-2.5 -1.5] and [-3.5] (seven pushes applied, none of the stale)", w, b)
			}
			for i, r := range rows {
				if r != -3.5 {
					t.Fatalf("row element %d = %v, want -3.5 (seven pushes applied, none of the stale)", i, r)
				}
			}
			st, err := c.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range st {
				if s.StaleDropped != 3 || s.AppliedPushes != 7 || s.GlobalStep != 7 || s.Mode != "async" {
					t.Fatalf("ps %d: stale dropped %d, applied %d, global step %d, mode %q; want 3, 7, 7, async", i, s.StaleDropped, s.AppliedPushes, s.GlobalStep, s.Mode)
				}
			}
		})
	}
}

// Synchronous mode with two replicas to aggregate: two workers push row
// gradients for the same keys (and some of their own) at step 0; each row
// moves by the learning rate times the average of the gradients it got,
// bit for bit as computed here: the sum in arrival order, times 1/2, as a
// dense variable would.
func TestSyncAveragesSparseRows(t *testing.T) {
	const dim, lr = 3, 0.25
	for _, grpcOnly := range []bool{false, true} {
		for _, rule := range []string{"sgd", "adagrad"} {
			t.Run(fmt.Sprintf("%s/%s", path(grpcOnly), rule), func(t *testing.T) {
				addrs := startPS(t, 2, 2)
				tables := []model.Table{{Name: "emb", Dim: dim, Init: "normal", InitStddev: 0.5, Seed: 7}}
				vars := []model.Variable{{Name: "d", Shape: []int{1}}}
				w0 := newClient(t, addrs, 0, vars, tables, grpcOnly)
				w1 := newClient(t, addrs, 1, vars, tables, grpcOnly)
				ctx := context.Background()
				if _, err := w0.Init(ctx, model.Params{"d": {0}}, client.InitOptions{
					Optimizer: optim.Config{Name: rule, LearningRate: lr}, Sync: true, ReplicasToAggregate: 2, NumWorkers: 2,
				}); err != nil {
					t.Fatal(err)
				}
				if _, err := w1.WaitReady(ctx, true); err != nil {
					t.Fatal(err)
				}
				shared := []uint64{1, 2, 3, 10, 11, 12, 1 << 40, 99}
				keys0 := append([]uint64{500}, shared...)
				keys1 := append(shared, 600)
				all := append(append([]uint64{500, 600}, shared...), 700) // 700: pushed by nobody
				pullAll := func(c *client.Client, minStep int64) []float32 {
					t.Helper()
					rows := make([]float32, dim*len(all))
					if _, err := c.PullRows(ctx, minStep, "emb", all, rows); err != nil {
						t.Fatal(err)
					}
					return rows
				}
				before := pullAll(w0, 0)
				rng := rand.New(rand.NewPCG(3, 4))
				grads := func(n int) []float32 {
					g := make([]float32, n*dim)
					for i := range g {
						g[i] = float32(rng.NormFloat64())
					}
					return g
				}
				g0, g1 := grads(len(keys0)), grads(len(keys1))
				if _, dropped, err := w0.PushRows(ctx, 0, "emb", keys0, g0); err != nil || dropped {
					t.Fatalf("worker 0's push: dropped %v, %v", dropped, err)
				}
				if _, dropped, err := w1.PushRows(ctx, 0, "emb", keys1, g1); err != nil || dropped {
					t.Fatalf("worker 1's push: dropped %v, %v", dropped, err)
				}
				after := pullAll(w0, 1)

				// The reference: per key, the sum of its gradients in
				// arrival order (worker 0's, then worker 1's), times 1/2,
				// then the rule's update of a fresh row.
				sum := map[uint64][]float32{}
				for _, p := range []struct {
					keys []uint64
					g    []float32
				}{{keys0, g0}, {keys1, g1}} {
					for i, k := range p.keys {
						if sum[k] == nil {
							sum[k] = make([]float32, dim)
						}
						for j := range dim {
							sum[k][j] += p.g[i*dim+j]
						}
					}
				}
				r, err := optim.New(optim.Config{Name: rule, LearningRate: lr})
				if err != nil {
					t.Fatal(err)
				}
				scale := 1 / float32(2)
				for i, k := range all {
					want := append([]float32(nil), before[i*dim:(i+1)*dim]...)
					if s := sum[k]; s != nil {
						avg := make([]float32, dim)
						for j := range avg {
							avg[j] = s[j] * scale
						}
						state := make([][]float32, r.StateSlots())
						for j := range state {
							state[j] = make([]float32, dim)
						}
						r.InitState(state)
						r.Update(want, avg, state, 1)
					}
					got := after[i*dim : (i+1)*dim]
					for j := range dim {
						if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
							t.Fatalf("key %d element %d after step 0: got %v, want %v (row %v moved by %s of the gradients %v)", k, j, got[j], want[j], before[i*dim:(i+1)*dim], rule, sum[k])
						}
					}
				}
				st, err := w0.Status(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for i, s := range st {
					if s.GlobalStep != 1 || s.Mode != "sync" {
						t.Fatalf("ps %d: global step %d, mode %q; want 1, sync", i, s.GlobalStep, s.Mode)
					}
				}
			})
		}
	}
}
