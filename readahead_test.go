package paramserv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv"
)

// countedBatches is a SparseModel of n batches (then ErrEndOfData, as a
// model trained over its data's passes): batch i touches the shared key 0
// and its own key i+1, with a gradient of 1 for each row. With SGD at a
// learning rate of 1 the rows count pushes: key 0's row is minus the
// pushes applied before it was pulled, key i+1's minus batch i's pushes.
type countedBatches struct {
	n, read    int
	keys       [2][]uint64
	seen       []float32 // key 0's row, by batch computed
	prev, last int       // calls of PrevSparseGradients and SparseGradients
	final      []float32 // the rows of keys 0..n, at the end
}

func (*countedBatches) Variables() []paramserv.Variable {
	return []paramserv.Variable{{Name: "b", Shape: []int{1}}}
}
func (*countedBatches) Tables() []paramserv.Table                               { return []paramserv.Table{{Name: "c", Dim: 1}} }
func (*countedBatches) Init(int64) paramserv.Params                             { return paramserv.Params{"b": {0}} }
func (*countedBatches) Progress(int64, int64, paramserv.Params, float64) string { return "" }
func (*countedBatches) ComputeGradients(paramserv.Params, paramserv.Params) (float64, error) {
	return 0, errors.New("sparse")
}
func (*countedBatches) Evaluate(paramserv.Params) (map[string]float64, error) {
	return nil, errors.New("sparse")
}

func (m *countedBatches) NextBatch() ([][]uint64, error) {
	if m.read == m.n {
		return nil, paramserv.ErrEndOfData
	}
	k := &m.keys[m.read%2]
	*k = append((*k)[:0], 0, uint64(m.read+1))
	m.read++
	return [][]uint64{*k}, nil
}

func (m *countedBatches) SparseGradients(p, g paramserv.Params, rows, rowGrads [][]float32) (float64, error) {
	m.last++
	return m.compute(m.read-1, rows, rowGrads)
}

func (m *countedBatches) compute(i int, rows, rowGrads [][]float32) (float64, error) {
	if i != len(m.seen) {
		return 0, fmt.Errorf("batch %d computed after %d batches", i, len(m.seen))
	}
	if k := m.keys[i%2]; len(k) != 2 || k[1] != uint64(i+1) {
		return 0, fmt.Errorf("batch %d: keys %v, want [0 %d]", i, k, i+1)
	}
	m.seen = append(m.seen, rows[0][0])
	rowGrads[0][0], rowGrads[0][1] = 1, 1
	return 0, nil
}

func (m *countedBatches) EvaluateSparse(_ paramserv.Params, lookup func(int, []uint64, []float32) error) (map[string]float64, error) {
	keys := make([]uint64, m.n+1)
	for i := range keys {
		keys[i] = uint64(i)
	}
	m.final = make([]float32, len(keys))
	return nil, lookup(0, keys, m.final)
}

// countedAhead is countedBatches as a SparseReadAhead.
type countedAhead struct{ *countedBatches }

func (m countedAhead) PrevSparseGradients(p, g paramserv.Params, rows, rowGrads [][]float32) (float64, error) {
	m.prev++
	return m.compute(m.read-2, rows, rowGrads)
}

// countedPlain hides everything but SparseModel's methods.
type countedPlain struct{ paramserv.SparseModel }

// runCounted trains m (n batches) with one asynchronous worker against a
// ps on a loopback port, to the end of its data.
func runCounted(t *testing.T, m paramserv.Model) {
	t.Helper()
	runCountedJob(t, paramserv.OverlapAuto, m)
}

// runCountedJob trains one asynchronous worker per model, each to the end
// of its data, with overlap, at SGD rate 1.
func runCountedJob(t *testing.T, overlap paramserv.Overlap, models ...paramserv.Model) {
	t.Helper()
	runJob(t, paramserv.RunConfig{
		Optimizer:  paramserv.Optimizer{Name: "sgd", LearningRate: 1},
		Overlap:    overlap,
		TrainSteps: 1 << 20, // the data ends first
		Logf:       t.Logf,
	}, models...)
}

// runJob runs a job of one ps on a loopback port and one worker per model
// (in this process), each with cfg and its own TF_CONFIG, and waits for
// every task to end.
func runJob(t *testing.T, cfg paramserv.RunConfig, models ...paramserv.Model) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := time.AfterFunc(time.Minute, func() { cancel(); t.Error("the job did not end within a minute") })
	defer deadline.Stop()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	workers := `"127.0.0.1:1"`
	for i := 1; i < len(models); i++ {
		workers += fmt.Sprintf(`,"127.0.0.1:%d"`, i+1)
	}
	cluster := fmt.Sprintf(`"cluster":{"ps":[%q],"worker":[%s]}`, lis.Addr(), workers)
	psDone := make(chan error, 1)
	go func() {
		psDone <- paramserv.ServePS(ctx, paramserv.PSConfig{TFConfig: `{` + cluster + `,"task":{"type":"ps","index":0}}`,
			Listen: func(string) (net.Listener, error) { return lis, nil }})
	}()
	errs := make(chan error, len(models))
	for i, m := range models {
		wc := cfg
		wc.TFConfig = `{` + cluster + fmt.Sprintf(`,"task":{"type":"worker","index":%d}}`, i)
		wc.NewModel = func(paramserv.ModelConfig) (paramserv.Model, error) { return m, nil }
		go func() { errs <- paramserv.Run(ctx, wc) }()
	}
	for range models {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-psDone; err != nil {
		t.Fatalf("ps: %v", err)
	}
}

// A model of one's own that implements SparseReadAhead trains with the
// overlap: the rows of batch t are pulled by the call that pushes batch
// t-2, in flight while batch t-1 is computed, so they miss exactly one
// push (batch t-1's), where without the overlap they miss none. Either way
// every batch is computed once and pushed once, the last one included.
func TestRunOverlapsASparseReadAheadModel(t *testing.T) {
	const n = 40
	for _, ahead := range []bool{true, false} {
		t.Run(fmt.Sprintf("read ahead %v", ahead), func(t *testing.T) {
			m := &countedBatches{n: n}
			if ahead {
				runCounted(t, countedAhead{m})
			} else {
				runCounted(t, countedPlain{m})
			}
			if len(m.seen) != n {
				t.Fatalf("%d batches computed, want %d", len(m.seen), n)
			}
			wantPrev, wantLast := 0, n
			if ahead {
				wantPrev, wantLast = n-1, 1 // the last batch, once the data ended
			}
			if m.prev != wantPrev || m.last != wantLast {
				t.Errorf("PrevSparseGradients called %d times, SparseGradients %d; want %d and %d", m.prev, m.last, wantPrev, wantLast)
			}
			for i, v := range m.seen {
				want := -float32(i) // every push before it applied
				if ahead && i > 0 {
					want = -float32(i - 1) // the one before still in flight
				}
				if v != want {
					t.Errorf("batch %d saw key 0's row at %v, want %v", i, v, want)
				}
			}
			if m.final == nil {
				t.Fatal("EvaluateSparse was not called")
			}
			if m.final[0] != -n {
				t.Errorf("key 0's row %v at the end, want %d (one push per batch)", m.final[0], -n)
			}
			for i := 1; i <= n; i++ {
				if m.final[i] != -1 {
					t.Errorf("batch %d's own key's row %v, want -1 (pushed once)", i-1, m.final[i])
				}
			}
		})
	}
}

// RunConfig.Overlap turns the overlap on with two workers, where the
// default leaves it off, and off with one, where the default turns it on.
// A value out of range is an error before anything runs.
func TestRunOverlapOption(t *testing.T) {
	const n = 30
	for _, tc := range []struct {
		overlap paramserv.Overlap
		workers int
		want    bool
	}{
		{paramserv.OverlapAuto, 2, false},
		{paramserv.OverlapOn, 2, true},
		{paramserv.OverlapAuto, 1, true},
		{paramserv.OverlapOff, 1, false},
	} {
		t.Run(fmt.Sprintf("%v/%d workers", tc.overlap, tc.workers), func(t *testing.T) {
			var ms []*countedBatches
			var models []paramserv.Model
			for range tc.workers {
				m := &countedBatches{n: n}
				ms = append(ms, m)
				models = append(models, countedAhead{m})
			}
			runCountedJob(t, tc.overlap, models...)
			for w, m := range ms {
				if len(m.seen) != n {
					t.Errorf("worker %d computed %d batches, want %d", w, len(m.seen), n)
				}
				wantPrev := 0
				if tc.want {
					wantPrev = n - 1
				}
				if m.prev != wantPrev {
					t.Errorf("worker %d: PrevSparseGradients called %d times, want %d (overlap %v)", w, m.prev, wantPrev, tc.want)
				}
			}
		})
	}
	err := paramserv.Run(context.Background(), paramserv.RunConfig{
		TFConfig:   `{"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]},"task":{"type":"worker","index":0}}`,
		NewModel:   func(paramserv.ModelConfig) (paramserv.Model, error) { return countedAhead{&countedBatches{n: 1}}, nil },
		Overlap:    paramserv.Overlap(7),
		TrainSteps: 1,
	})
	if err == nil || !strings.Contains(err.Error(), "Overlap(7)") {
		t.Errorf("Run with Overlap(7): %v, want an error naming it", err)
	}
}

// plantedAhead is plantedRows as a SparseReadAhead: its batches are all
// alike, so the batch before the last is computed as the last one.
type plantedAhead struct {
	*plantedRows
	prev int
}

func (m *plantedAhead) PrevSparseGradients(p, g paramserv.Params, rows, rowGrads [][]float32) (float64, error) {
	m.prev++
	return m.SparseGradients(p, g, rows, rowGrads)
}

// The overlap keeps the model's quality: plantedRows learns its planted
// rows and bias to the same precision with and without it (at a learning
// rate its one step staler gradients allow: at 0.5 they diverge).
func TestRunSparseReadAheadKeepsQuality(t *testing.T) {
	worst := map[bool]float64{}
	for _, ahead := range []bool{true, false} {
		m := &plantedRows{}
		var model paramserv.Model = m
		pa := &plantedAhead{plantedRows: m}
		if ahead {
			model = pa
		}
		runPlanted(t, model, 2000)
		if ahead && pa.prev < 1990 {
			t.Fatalf("PrevSparseGradients called %d times in 2000 steps: the overlap is off", pa.prev)
		}
		for k, w := range m.final {
			worst[ahead] = max(worst[ahead], float64(abs32(w-plantedW(k))))
		}
		worst[ahead] = max(worst[ahead], float64(abs32(m.finalB-plantedBias)))
	}
	t.Logf("worst error: %.2g with the overlap, %.2g without", worst[true], worst[false])
	if worst[true] > 1e-3 || worst[false] > 1e-3 {
		t.Errorf("worst error of a row or the bias: %.2g with the overlap, %.2g without; want both <= 1e-3", worst[true], worst[false])
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// runPlanted trains m for steps asynchronous steps of one worker.
func runPlanted(t *testing.T, m paramserv.Model, steps int64) {
	t.Helper()
	runJob(t, paramserv.RunConfig{Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 0.2}, TrainSteps: steps}, m)
}
