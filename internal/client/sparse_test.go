package client

import (
	"context"
	"math/rand/v2"
	"net"
	"sync"
	"testing"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
)

// startPS starts n ps on loopback in this process and returns their addresses.
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
		wg.Go(func() { server.ServeListener(ctx, lis, s) })
	}
	return addrs
}

// The same small problem trained as a dense variable and as a sparse table
// with keys 0..n-1 gives the same values, bit for bit, across two ps.
func TestSparseAndDensePathsAgree(t *testing.T) {
	const n, dim = 50, 3
	for _, rule := range []string{"sgd", "adagrad", "adam", "ftrl"} {
		t.Run(rule, func(t *testing.T) {
			addrs := startPS(t, 2, 1)
			vars := []model.Variable{{Name: "dense", Shape: []int{n, dim}}}
			c, err := New(addrs, vars, Options{Tables: []model.Table{{Name: "emb", Dim: dim}}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if _, err := c.WaitReady(ctx, false); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Init(ctx, model.NewParams(vars), InitOptions{Optimizer: optim.Config{Name: rule, LearningRate: 0.1}, NumWorkers: 1}); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			grads := model.NewParams(vars)
			for step := int64(0); step < 20; step++ {
				// Every key every step, so each dense element and each row
				// sees the same sequence of updates; keys in a shuffled order.
				keys := make([]uint64, n)
				for i, k := range rng.Perm(n) {
					keys[i] = uint64(k)
				}
				rows := make([]float32, n*dim)
				for i, k := range keys {
					for j := range dim {
						g := float32(rng.NormFloat64())
						rows[i*dim+j] = g
						grads["dense"][int(k)*dim+j] = g
					}
				}
				call := c.Do(ctx, &Request{Push: true, Step: step, Grads: grads, SparseGrads: []Rows{{Table: "emb", Keys: keys, Values: rows}}})
				if call.Err != nil {
					t.Fatal(call.Err)
				}
			}
			params := model.NewParams(vars)
			keys := make([]uint64, n)
			for i := range keys {
				keys[i] = uint64(n - 1 - i) // reversed: the scatter must put rows back in place
			}
			rows := make([]float32, n*dim)
			call := c.Do(ctx, &Request{Pull: true, Params: params, SparseParams: []Rows{{Table: "emb", Keys: keys, Values: rows}}})
			if call.Err != nil {
				t.Fatal(call.Err)
			}
			for i, k := range keys {
				for j := range dim {
					if d, s := params["dense"][int(k)*dim+j], rows[i*dim+j]; d != s {
						t.Fatalf("key %d element %d: dense %v, sparse %v", k, j, d, s)
					}
				}
			}
			st, err := c.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			total := st[0].Tables[0].Rows + st[1].Tables[0].Rows
			if total != n || st[0].Tables[0].Rows == 0 || st[1].Tables[0].Rows == 0 {
				t.Fatalf("rows per shard %d + %d, want %d spread over both", st[0].Tables[0].Rows, st[1].Tables[0].Rows, n)
			}
		})
	}
}
