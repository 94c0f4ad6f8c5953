package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// Calls made by Send give the same values, steps, drops and counters as
// gRPC for the same random pushes and pulls (see TestDataPathAgreesWithGRPC),
// with one and two ps.
func TestSendAgreesWithGRPC(t *testing.T) {
	vars := []model.Variable{{Name: "a", Shape: []int{30, 4}}, {Name: "b", Shape: []int{7}}}
	tables := []model.Table{{Name: "emb", Dim: 3, MinCount: 2, EvictAfterSteps: 6}, {Name: "lr", Dim: 1}}
	for _, numPS := range []int{1, 2} {
		for _, sync := range []bool{false, true} {
			t.Run(fmt.Sprintf("ps=%d/sync=%v", numPS, sync), func(t *testing.T) {
				tw := newTwin(t, numPS, vars, tables, InitOptions{
					Optimizer: optim.Config{Name: "ftrl", LearningRate: 0.1}, Sync: sync, ReplicasToAggregate: 1, NumWorkers: 1,
				})
				tw.send = true
				runAgreement(t, tw, 40, uint64(numPS)+7)
			})
		}
	}
}

// sendClient is a client of a fresh ps with one table "emb" of dim 2,
// initialised for plain SGD at rate 1.
func sendClient(t *testing.T, numPS int, opts Options) *Client {
	t.Helper()
	cl := startCluster(t, numPS, 1)
	opts.Tables = []model.Table{{Name: "emb", Dim: 2}}
	c, err := New(cl.addrs, []model.Variable{{Name: "b", Shape: []int{1}}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Init(context.Background(), model.Params{"b": {0}}, InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}); err != nil {
		t.Fatal(err)
	}
	return c
}

// A call made by Send is applied by the ps while the caller goes on, and
// its answer is read only in Wait: until then Done stays open and the
// caller's buffers are untouched. Wait may be called again, and from
// several goroutines.
func TestSendLandsInWait(t *testing.T) {
	for _, numPS := range []int{1, 2} {
		t.Run(fmt.Sprintf("ps=%d", numPS), func(t *testing.T) {
			c := sendClient(t, numPS, Options{})
			ctx := context.Background()
			keys := []uint64{3, 1, 4, 1 << 40, 5}
			grads := []float32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
			vals := make([]float32, 10)
			params := model.Params{"b": {7}}
			call := c.Send(ctx, &Request{Push: true, Grads: model.Params{"b": {2}}, SparseGrads: []Rows{{Table: "emb", Keys: keys, Values: grads}},
				Pull: true, Params: params, SparseParams: []Rows{{Table: "emb", Keys: keys, Values: vals}}})
			if !call.Deferred() {
				t.Fatal("Send made a call that lands by itself")
			}
			deadline := time.Now().Add(time.Minute)
			for applied := false; !applied; {
				st, err := c.Status(ctx)
				if err != nil {
					t.Fatal(err)
				}
				applied = true
				for _, s := range st {
					applied = applied && s.AppliedPushes == 1
				}
				if time.Now().After(deadline) {
					t.Fatalf("the push was not applied within a minute: %v", st)
				}
			}
			time.Sleep(20 * time.Millisecond) // the answers are written by now
			select {
			case <-call.Done:
				t.Fatal("the call landed before Wait")
			default:
			}
			if vals[0] != 0 || params["b"][0] != 7 {
				t.Fatalf("rows %v and bias %v written before Wait", vals, params["b"])
			}
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					if err := call.Wait(); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			for i, v := range vals {
				if v != -1 {
					t.Fatalf("row value %d is %v after one push of 1 at rate 1, want -1 (%v)", i, v, vals)
				}
			}
			if params["b"][0] != -2 || call.Step != 1 || call.Dropped {
				t.Fatalf("bias %v, step %d, dropped %v; want -2, 1, false", params["b"][0], call.Step, call.Dropped)
			}
			// The connections are back: the next call uses them.
			if _, err := c.Pull(ctx, 0, params); err != nil {
				t.Fatal(err)
			}
			for i, p := range c.dp.ps {
				if len(p.idle) != 1 {
					t.Errorf("ps %d: %d idle connections, want 1", i, len(p.idle))
				}
			}
		})
	}
}

// Large calls, and calls with incremental pulls, are made as DoAsync makes
// them: they land by themselves.
func TestSendLargeOrIncrementalLandsByItself(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts Options
		keys int
	}{
		{"large", Options{}, sendMaxBytes/8 + 1},
		{"incremental", Options{IncrementalPull: true}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sendClient(t, 1, tc.opts)
			keys := make([]uint64, tc.keys)
			for i := range keys {
				keys[i] = uint64(i)
			}
			vals := make([]float32, 2*len(keys))
			call := c.Send(ctx, &Request{Pull: true, SparseParams: []Rows{{Table: "emb", Keys: keys, Values: vals}}})
			if call.Deferred() {
				t.Fatal("the call lands only in Wait")
			}
			select {
			case <-call.Done:
			case <-time.After(time.Minute):
				t.Fatal("the call did not land by itself within a minute")
			}
			if err := call.Wait(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A ps that cannot be reached fails the call in Wait.
func TestSendToAnUnreachablePS(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	c, err := New([]string{addr}, nil, Options{Tables: []model.Table{{Name: "emb", Dim: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := c.Send(context.Background(), &Request{Pull: true, SparseParams: []Rows{{Table: "emb", Keys: []uint64{1}, Values: make([]float32, 2)}}})
	if err := call.Wait(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("call to a closed port: %v, want Unavailable", err)
	}
}
