package optim

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/parallel/goroutines"
)

// TestApplyParallelBitwise: ApplyParallel over any number of workers leaves
// param and state bit for bit as one Update does.
func TestApplyParallelBitwise(t *testing.T) {
	const n = 3*MinChunk + 123 // three chunks at most, the last uneven
	for _, name := range Names() {
		r := mustNew(t, Config{Name: name, LearningRate: 0.01, L1: 0.01, L2: 0.01, Nesterov: true})
		for _, workers := range []int{0, 1, 2, 3, 8} {
			rng := rand.New(rand.NewPCG(7, uint64(workers)))
			p0 := randSlice(rng, n, 1, 0)
			want, got := append([]float32(nil), p0...), append([]float32(nil), p0...)
			wantState, gotState := newState(r, n), newState(r, n)
			for step := int64(1); step <= 3; step++ {
				grad := randSlice(rng, n, 1, 0.2)
				r.Update(want, grad, wantState, step)
				ApplyParallel(r, got, grad, gotState, step, goroutines.Width(workers))
			}
			if i := firstDiff(got, want); i >= 0 {
				t.Fatalf("%s, %d workers: param[%d] = %v, want %v", name, workers, i, got[i], want[i])
			}
			for j := range wantState {
				if i := firstDiff(gotState[j], wantState[j]); i >= 0 {
					t.Fatalf("%s, %d workers: state[%d][%d] = %v, want %v", name, workers, j, i, gotState[j][i], wantState[j][i])
				}
			}
		}
	}
}

// firstDiff is the first index where a and b differ in their bits, or -1.
func firstDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestApplyParallelLengthMismatch: a bad call panics on the caller's
// goroutine, where it can be recovered, not in a worker.
func TestApplyParallelLengthMismatch(t *testing.T) {
	r := mustNew(t, Config{Name: "adam", LearningRate: 0.1})
	const n = 4 * MinChunk
	state := newState(r, n)
	state[1] = state[1][:n-1]
	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, "len(state[1])") {
			t.Errorf("panic %q, want one about len(state[1])", msg)
		}
	}()
	ApplyParallel(r, make([]float32, n), make([]float32, n), state, 1, goroutines.Width(4))
}
