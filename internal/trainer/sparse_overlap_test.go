package trainer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// aheadModel is a sparse model of n batches, batch i touching keys
// 100i+1 and 100i+2 of one table. It keeps its keys in two buffers, as
// sparselr does, so a batch's keys are overwritten by the batch after the
// next. Its row gradients are the keys, its dense gradient the batch's
// index; it checks that the rows it computes from are those of its batch
// (the fake ps pulls a key's row as the key) and tells the ps when a
// compute starts.
type aheadModel struct {
	n        int
	read     int // batches NextBatch returned
	bufs     [2][]uint64
	computed []int
	started  func(batch int, params, grads model.Params, rows, rowGrads [][]float32)
	t        *testing.T
}

func (m *aheadModel) Variables() []model.Variable {
	return []model.Variable{{Name: "b", Shape: []int{1}}}
}
func (m *aheadModel) Init(int64) model.Params                                      { return model.Params{"b": {0}} }
func (m *aheadModel) ComputeGradients(model.Params, model.Params) (float64, error) { return 0, nil }
func (m *aheadModel) Progress(int64, int64, model.Params, float64) string          { return "" }
func (m *aheadModel) Evaluate(model.Params) (map[string]float64, error)            { return nil, nil }
func (m *aheadModel) Tables() []model.Table                                        { return []model.Table{{Name: "t", Dim: 1}} }
func (m *aheadModel) EvaluateSparse(model.Params, func(int, []uint64, []float32) error) (map[string]float64, error) {
	return nil, nil
}

func (m *aheadModel) keysOf(i int) []uint64 { return []uint64{uint64(100*i + 1), uint64(100*i + 2)} }

func (m *aheadModel) NextBatch() ([][]uint64, error) {
	if m.read == m.n {
		return nil, model.ErrEndOfData
	}
	b := &m.bufs[m.read%2]
	*b = append((*b)[:0], m.keysOf(m.read)...)
	m.read++
	return [][]uint64{*b}, nil
}

func (m *aheadModel) SparseGradients(params, grads model.Params, rows, rowGrads [][]float32) (float64, error) {
	return m.compute(m.read-1, params, grads, rows, rowGrads)
}

func (m *aheadModel) PrevSparseGradients(params, grads model.Params, rows, rowGrads [][]float32) (float64, error) {
	return m.compute(m.read-2, params, grads, rows, rowGrads)
}

func (m *aheadModel) compute(i int, params, grads model.Params, rows, rowGrads [][]float32) (float64, error) {
	m.started(i, params, grads, rows, rowGrads)
	m.computed = append(m.computed, i)
	for j, k := range m.keysOf(i) {
		if rows[0][j] != float32(k) {
			m.t.Errorf("batch %d computed from rows %v, want its keys' rows %v", i, rows[0], m.keysOf(i))
			break
		}
		rowGrads[0][j] = float32(k)
	}
	grads["b"][0] = float32(i)
	return 0, nil
}

// aheadPS is a fake ps whose asynchronous calls land (are applied and
// answered) only when the worker starts its next compute, or, if the
// worker waits for one instead, after a second. It records which, the
// keys each call pulled, and each push.
type aheadPS struct {
	localPS
	mu       sync.Mutex
	step     int64
	pending  *aheadCall
	overlaps int        // calls landed under a compute
	waited   int        // calls the worker waited for
	inFlight [][]uint64 // per compute, the keys the call in flight pulls (nil: none)
	pushes   []aheadPush
	aliased  int
	calls    int   // asynchronous calls made
	failCall int   // the asynchronous call (1-based) that fails with failErr
	failErr  error // (it is neither applied nor answered)
	now      bool  // calls land at once
}

type aheadCall struct {
	req  *client.Request
	call *client.Call
	done chan struct{}
	once sync.Once
}

type aheadPush struct {
	tag   int64
	keys  []uint64
	grads []float32
	dense float32
}

// apply applies req's push and answers its pull, as the ps would.
func (p *aheadPS) apply(req *client.Request, call *client.Call) {
	if req.Push {
		p.pushes = append(p.pushes, aheadPush{tag: req.Step, keys: slices.Clone(req.SparseGrads[0].Keys),
			grads: slices.Clone(req.SparseGrads[0].Values), dense: req.Grads["b"][0]})
		p.step++
	}
	for _, r := range req.SparseParams {
		for j, k := range r.Keys {
			r.Values[j] = float32(k)
		}
	}
	req.Params["b"][0] = float32(p.step)
	call.Step = p.step
}

func (p *aheadPS) Do(_ context.Context, req *client.Request) *client.Call {
	done := make(chan struct{})
	call := &client.Call{Done: done}
	p.mu.Lock()
	p.apply(req, call)
	p.mu.Unlock()
	close(done)
	return call
}

// Send is DoAsync: the fake's calls land by themselves, Wait waits.
func (p *aheadPS) Send(ctx context.Context, req *client.Request) *client.Call {
	return p.DoAsync(ctx, req)
}

func (p *aheadPS) DoAsync(_ context.Context, req *client.Request) *client.Call {
	done := make(chan struct{})
	ac := &aheadCall{req: req, call: &client.Call{Done: done}, done: done}
	p.mu.Lock()
	p.pending = ac
	p.calls++
	fail := p.calls == p.failCall
	p.mu.Unlock()
	if fail {
		ac.call.Err = p.failErr
		ac.once.Do(func() {}) // lands failed, applying nothing
		p.mu.Lock()
		p.pending = nil
		p.mu.Unlock()
		close(done)
		return ac.call
	}
	if p.now {
		p.answer(ac, &p.waited)
		return ac.call
	}
	time.AfterFunc(time.Second, func() { p.answer(ac, &p.waited) })
	return ac.call
}

func (p *aheadPS) answer(ac *aheadCall, count *int) {
	ac.once.Do(func() {
		p.mu.Lock()
		if p.pending == ac {
			p.pending = nil
		}
		p.apply(ac.req, ac.call)
		*count++
		p.mu.Unlock()
		close(ac.done)
	})
}

func (p *aheadPS) started(_ int, params, grads model.Params, rows, rowGrads [][]float32) {
	p.mu.Lock()
	ac := p.pending
	p.pending = nil
	if ac == nil {
		p.inFlight = append(p.inFlight, nil)
		p.mu.Unlock()
		return
	}
	r := ac.req
	var keys []uint64
	if len(r.SparseParams) > 0 {
		keys = slices.Clone(r.SparseParams[0].Keys)
		if &r.SparseParams[0].Values[0] == &rows[0][0] {
			p.aliased++
		}
	}
	if keys == nil {
		keys = []uint64{} // a call in flight that pulls no rows
	}
	p.inFlight = append(p.inFlight, keys)
	if &r.Params["b"][0] == &params["b"][0] || (r.Push && (&r.Grads["b"][0] == &grads["b"][0] || &r.SparseGrads[0].Values[0] == &rowGrads[0][0])) {
		p.aliased++
	}
	p.mu.Unlock()
	p.answer(ac, &p.overlaps)
}

func (p *aheadPS) Pull(context.Context, int64, model.Params) (int64, error) { return p.step, nil }
func (p *aheadPS) Status(context.Context) ([]*pb.StatusResponse, error)     { return nil, nil }

// In asynchronous mode a sparse worker reads a batch ahead: while it
// computes batch t, the call that pulls batch t+1's rows (and pushes batch
// t-1's gradients) is in flight, on other buffers than the compute's. Each
// batch is computed once from its own rows and pushed once with its own
// keys (copied: the model's are overwritten by then), tagged with the step
// its rows were pulled at; the last batch of the data is pushed and waited
// for; at the goal the gradients computed are not pushed.
func TestSparseOverlapPullsTheNextBatchDuringTheCompute(t *testing.T) {
	for _, tc := range []struct {
		name     string
		batches  int
		goal     int64
		computed int // batches computed
		pushed   int // batches pushed (0..pushed-1)
		waited   int // calls waited for
		tags     []int64
	}{
		{"data ends", 5, 1 << 40, 5, 5, 1, []int64{0, 0, 1, 2, 3}},
		{"goal", 8, 3, 4, 3, 0, []int64{0, 0, 1}},
		{"one batch", 1, 1 << 40, 1, 1, 1, []int64{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := &aheadPS{}
			m := &aheadModel{n: tc.batches, started: ps.started, t: t}
			cfg := Config{TrainSteps: tc.goal, StepsToValidate: 100}
			cfg.defaults()
			var st loopStats
			params := model.NewParams(m.Variables())
			if err := sparseLoop(context.Background(), cfg, ps, m, params, nil, &st, true); err != nil {
				t.Fatal(err)
			}
			if want := seq(tc.computed); !slices.Equal(m.computed, want) {
				t.Fatalf("computed batches %v, want %v", m.computed, want)
			}
			if ps.aliased > 0 {
				t.Errorf("%d computes used buffers a call in flight was using", ps.aliased)
			}
			for i, keys := range ps.inFlight {
				var want []uint64
				switch {
				case i+1 < tc.batches:
					want = m.keysOf(i + 1)
				case i > 0:
					want = []uint64{} // the push of the batch before, pulling no rows
				}
				if !slices.Equal(keys, want) || (keys == nil) != (want == nil) {
					t.Errorf("while batch %d was computed the call in flight pulled keys %v, want %v (nil: no call)", i, keys, want)
				}
			}
			if ps.waited != tc.waited || ps.overlaps != tc.computed-boolInt(tc.batches == 1) {
				t.Errorf("%d calls landed under a compute, %d were waited for; want %d and %d", ps.overlaps, ps.waited, tc.computed-boolInt(tc.batches == 1), tc.waited)
			}
			if len(ps.pushes) != tc.pushed {
				t.Fatalf("%d pushes, want %d", len(ps.pushes), tc.pushed)
			}
			for i, p := range ps.pushes {
				keys := m.keysOf(i)
				if !slices.Equal(p.keys, keys) || !slices.Equal(p.grads, []float32{float32(keys[0]), float32(keys[1])}) || p.dense != float32(i) || p.tag != tc.tags[i] {
					t.Errorf("push %d: keys %v, row gradients %v, dense %v, tag %d; want batch %d's keys %v as gradients, %d, tag %d",
						i, p.keys, p.grads, p.dense, p.tag, i, keys, i, tc.tags[i])
				}
			}
			if st.local != int64(tc.pushed) || st.step != int64(tc.pushed) || params["b"][0] != float32(tc.pushed) {
				t.Errorf("ended at step %d after %d local steps, b=%v in the caller's params; want %d each", st.step, st.local, params["b"][0], tc.pushed)
			}
			if st.ended != (tc.goal > 1000) {
				t.Errorf("loop marked ended=%v", st.ended)
			}
		})
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A failed call of the overlap (a push in flight) ends the loop with its
// error, naming the step, for the worker's recovery to retry as without
// the overlap; the failed push is not counted as a step.
func TestSparseOverlapReportsAFailedPush(t *testing.T) {
	failErr := errors.New("connection reset by the fake ps")
	ps := &aheadPS{failCall: 3, failErr: failErr}
	m := &aheadModel{n: 10, started: ps.started, t: t}
	cfg := Config{TrainSteps: 100, StepsToValidate: 100}
	cfg.defaults()
	var st loopStats
	err := sparseLoop(context.Background(), cfg, ps, m, model.NewParams(m.Variables()), nil, &st, true)
	if !errors.Is(err, failErr) || !strings.Contains(err.Error(), "step 0:") {
		t.Fatalf("sparseLoop: %v, want the fake's error for the push computed at step 0", err)
	}
	// Call 1 pulled batch 1, call 2 pushed batch 0, call 3 (batch 1's push) failed.
	if st.local != 1 || len(ps.pushes) != 1 {
		t.Errorf("%d steps landed, %d pushes applied; want 1 and 1", st.local, len(ps.pushes))
	}
}

// A failed call loses no batch but the one whose push it carried: the loop
// after the recovery (here, called again with the same loopStats) pushes
// the gradients computed and not sent, then computes the batches read ahead
// before it reads more. Every batch is computed once, and every batch but
// the failed push's is pushed once, in order, with its own keys. The loop
// without the overlap keeps its read-ahead batch the same way.
func TestSparseLoopTrainsTheBatchesReadBeforeAFailure(t *testing.T) {
	for _, tc := range []struct {
		name     string
		overlap  bool
		failCall int
		batches  int
		lost     int // the batch whose push failed
	}{
		// Overlap: call 1 pulls batch 1, call k>=2 pushes batch k-2; call 3
		// fails while batch 2 is computed and batches 3 and 4 are read.
		{"overlap", true, 3, 10, 1},
		// The failure with the last batch read (only batch 5 held, the data
		// ended) and with only gradients left (batch 5 computed).
		{"overlap, data ends", true, 5, 6, 3},
		{"overlap, last push", true, 6, 6, 4},
		// Without: call k pushes batch k-1 and pulls batch k.
		{"no overlap", false, 3, 10, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failErr := errors.New("connection reset by the fake ps")
			ps := &aheadPS{failCall: tc.failCall, failErr: failErr, now: !tc.overlap}
			m := &aheadModel{n: tc.batches, started: ps.started, t: t}
			if !tc.overlap {
				m.started = func(int, model.Params, model.Params, [][]float32, [][]float32) {}
			}
			cfg := Config{TrainSteps: 100, StepsToValidate: 100}
			cfg.defaults()
			var st loopStats
			params := model.NewParams(m.Variables())
			err := sparseLoop(context.Background(), cfg, ps, m, params, nil, &st, tc.overlap)
			if !errors.Is(err, failErr) {
				t.Fatalf("first loop: %v, want the fake's error", err)
			}
			if err := sparseLoop(context.Background(), cfg, ps, m, params, nil, &st, tc.overlap); err != nil {
				t.Fatalf("loop after the failure: %v", err)
			}
			if want := seq(tc.batches); !slices.Equal(m.computed, want) {
				t.Errorf("computed batches %v, want %v (each once)", m.computed, want)
			}
			var got, want []int
			for _, p := range ps.pushes {
				got = append(got, int(p.dense))
				if i := int(p.dense); !slices.Equal(p.keys, m.keysOf(i)) || !slices.Equal(p.grads, []float32{float32(m.keysOf(i)[0]), float32(m.keysOf(i)[1])}) {
					t.Errorf("push of batch %d: keys %v, row gradients %v; want its keys %v as both", i, p.keys, p.grads, m.keysOf(i))
				}
			}
			for i := range tc.batches {
				if i != tc.lost {
					want = append(want, i)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("batches pushed %v, want %v (all but batch %d, whose push failed)", got, want, tc.lost)
			}
			if !st.ended || st.local != int64(len(want)) {
				t.Errorf("ended=%v after %d local steps; want true, %d", st.ended, st.local, len(want))
			}
		})
	}
}
