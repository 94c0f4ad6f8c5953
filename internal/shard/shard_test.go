package shard

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
)

// The same pushes give the same bytes of state however the update is cut:
// whole (the gRPC path, the rule over all values at once, here spread over
// workers as the ps does) or streamed in chunks (the data path's pipelined
// push), for every rule.
func TestStreamedApplyIsBitEqual(t *testing.T) {
	for _, rule := range []string{"sgd", "momentum", "adagrad", "adam", "ftrl"} {
		t.Run(rule, func(t *testing.T) {
			layout := Layout{
				Vars:       []VarSpec{{Name: "w", Shape: []int64{37, 3}}, {Name: "b", Shape: []int64{5}}},
				Optimizer:  optim.Config{Name: rule, LearningRate: 0.1},
				NumWorkers: 2,
			}
			rng := rand.New(rand.NewPCG(1, 2))
			values := [][]float32{randFloats(rng, 111), randFloats(rng, 5)}
			whole := New(Config{NumWorkers: 2, Update: func(r optim.Rule, p, g []float32, st [][]float32, step int64) {
				optim.ApplyParallel(r, p, g, st, step, testRunner)
			}})
			chunked := New(Config{NumWorkers: 2})
			for _, sh := range []*Shard{whole, chunked} {
				if _, err := sh.Init(layout, [][]float32{slices.Clone(values[0]), slices.Clone(values[1])}); err != nil {
					t.Fatal(err)
				}
			}
			now := time.Unix(0, 0)
			for step := range 20 {
				grads := [][]float32{randFloats(rng, 111), randFloats(rng, 5)}
				push := func() *Push {
					return &Push{Worker: step % 2, Step: int64(step), Dense: []DenseGrad{
						{Name: []byte("w"), Values: grads[0], Bad: Unchecked},
						{Name: []byte("b"), Values: grads[1], Bad: Unchecked},
					}}
				}
				p := push()
				if err := whole.Check(p); err != nil {
					t.Fatal(err)
				}
				if _, err := whole.Apply(p, now, nil); err != nil {
					t.Fatal(err)
				}
				q := push()
				if err := chunked.Check(q); err != nil {
					t.Fatal(err)
				}
				chunks, began := 0, false
				stream := &Stream{
					Chunk:   1 + step%7,
					Begin:   func(int64) { began = true },
					Var:     func(int, *Var) {},
					Updated: func(*Var, int, int) { chunks++ },
				}
				if _, err := chunked.Apply(q, now, stream); err != nil {
					t.Fatal(err)
				}
				if !began || chunks == 0 {
					t.Fatalf("step %d: the stream's hooks did not run (began %v, %d chunks)", step, began, chunks)
				}
			}
			a, b := whole.Snapshot(), chunked.Snapshot()
			if len(a.Tensors) != len(b.Tensors) {
				t.Fatalf("%d tensors against %d", len(a.Tensors), len(b.Tensors))
			}
			for i := range a.Tensors {
				if a.Tensors[i].Name != b.Tensors[i].Name || !slices.Equal(a.Tensors[i].Data, b.Tensors[i].Data) {
					t.Fatalf("tensor %s differs between a whole and a streamed update", a.Tensors[i].Name)
				}
			}
			if !slices.Equal(sortedKeys(a.Meta), sortedKeys(b.Meta)) || a.Meta["updates/w"] != "20" || b.Meta["updates/w"] != "20" {
				t.Fatalf("update counts: %v and %v, want 20", a.Meta, b.Meta)
			}
		})
	}
}

func randFloats(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

// A push checked against one state is not applied to another (a restore
// came in between): Apply refuses it and nothing changes.
func TestApplyRefusesAPushCheckedBeforeAnInstall(t *testing.T) {
	sh := New(Config{NumWorkers: 1})
	l := Layout{Vars: []VarSpec{{Name: "w", Shape: []int64{1}}}, Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}
	if _, err := sh.Init(l, [][]float32{{1}}); err != nil {
		t.Fatal(err)
	}
	p := &Push{Dense: []DenseGrad{{Name: []byte("w"), Values: []float32{1}, Bad: -1}}}
	if err := sh.Check(p); err != nil {
		t.Fatal(err)
	}
	st, err := Build(l, func(_ int, dst []float32) error { dst[0] = 7; return nil })
	if err != nil {
		t.Fatal(err)
	}
	sh.Install(st)
	if _, err := sh.Apply(p, time.Time{}, nil); err == nil {
		t.Fatal("Apply took a push checked against the old state")
	}
	if got := sh.Var("w").value[0]; got != 7 {
		t.Fatalf("w = %v, want 7", got)
	}
}

func TestNumValues(t *testing.T) {
	for _, tc := range []struct {
		shape []int64
		n     int
		ok    bool
	}{
		{[]int64{}, 1, true},
		{[]int64{3, 4}, 12, true},
		{[]int64{math.MaxInt32}, math.MaxInt32, true},
		{[]int64{math.MaxInt32 + 1}, 0, false},
		{[]int64{1<<62 + 1}, 0, false},
		{[]int64{1 << 32, 1 << 32}, 0, false}, // the product overflows 64 bits
		{[]int64{2, 0}, 0, false},
		{[]int64{-1}, 0, false},
	} {
		n, err := NumValues(tc.shape)
		if (err == nil) != tc.ok || n != tc.n {
			t.Errorf("NumValues(%v) = %d, %v; want %d, ok %v", tc.shape, n, err, tc.n, tc.ok)
		}
	}
}
