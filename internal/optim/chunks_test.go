package optim

import (
	"slices"
	"sync"
	"testing"

	"github.com/paramserv/paramserv/internal/parallel/goroutines"
)

// lenRecorder is sgd that records the length of every Update call.
type lenRecorder struct {
	Rule
	mu   sync.Mutex
	lens []int
}

func (r *lenRecorder) Update(param, grad []float32, state [][]float32, step int64) {
	r.mu.Lock()
	r.lens = append(r.lens, len(param))
	r.mu.Unlock()
	r.Rule.Update(param, grad, state, step)
}

// TestApplyParallelChunks: chunks are never shorter than MinChunk, so a
// slice shorter than 2*MinChunk is one Update whatever the workers, and a
// longer one is split into min(workers, n/MinChunk) near-equal chunks.
func TestApplyParallelChunks(t *testing.T) {
	for _, tc := range []struct {
		n, workers int
		want       []int // chunk lengths, sorted
	}{
		{MinChunk - 1, 8, []int{MinChunk - 1}},
		{MinChunk, 8, []int{MinChunk}},
		{2*MinChunk - 1, 8, []int{2*MinChunk - 1}},
		{2 * MinChunk, 8, []int{MinChunk, MinChunk}},
		{2 * MinChunk, 1, []int{2 * MinChunk}},
		{3*MinChunk + 2, 8, []int{MinChunk, MinChunk + 1, MinChunk + 1}},
		{3*MinChunk + 2, 2, []int{(3*MinChunk + 2) / 2, (3*MinChunk + 2) / 2}},
	} {
		r := &lenRecorder{Rule: mustNew(t, Config{Name: "sgd", LearningRate: 0.1})}
		ApplyParallel(r, make([]float32, tc.n), make([]float32, tc.n), nil, 1, goroutines.Width(tc.workers))
		slices.Sort(r.lens)
		if !slices.Equal(r.lens, tc.want) {
			t.Errorf("n = %d, %d workers: Update lengths %v, want %v", tc.n, tc.workers, r.lens, tc.want)
		}
	}
}

// TestApplyParallelSmallNoAlloc: below two chunks ApplyParallel is a plain
// Update on the caller's goroutine and allocates nothing, as Update.
func TestApplyParallelSmallNoAlloc(t *testing.T) {
	r := mustNew(t, Config{Name: "adam", LearningRate: 0.1})
	n := 2*MinChunk - 1
	param, grad := make([]float32, n), make([]float32, n)
	state := newState(r, n)
	step := int64(0)
	allocs := testing.AllocsPerRun(5, func() {
		step++
		ApplyParallel(r, param, grad, state, step, goroutines.Width(8))
	})
	if allocs != 0 {
		t.Errorf("ApplyParallel of %d values allocates %v times per call, want 0", n, allocs)
	}
}
