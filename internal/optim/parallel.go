package optim

import "sync"

// MinChunk is the fewest elements ApplyParallel gives one goroutine: below
// about this many, starting a goroutine costs more than the update it runs.
const MinChunk = 64 << 10

// ApplyParallel is r.Update(param, grad, state, step) split into contiguous
// chunks of at least MinChunk elements, run on up to workers goroutines (the
// caller's own included). It returns when every chunk is done, and starts no
// goroutine for a slice shorter than 2*MinChunk or for workers < 2. Because
// the rules are per-coordinate, the result is bit for bit that of one Update.
//
// As with Update, param, grad and each state slice must have the same length
// (ApplyParallel panics, before starting any goroutine, if not), and nothing
// else may touch them until it returns.
func ApplyParallel(r Rule, param, grad []float32, state [][]float32, step int64, workers int) {
	n := len(param)
	chunks := min(workers, n/MinChunk)
	if chunks < 2 || !PerCoordinate(r) {
		r.Update(param, grad, state, step)
		return
	}
	// Check here, on the caller's goroutine, so that a bad call panics
	// where it can be recovered rather than crashing a worker goroutine.
	checkLens(r.Name(), r.StateSlots(), param, grad, state)

	k := len(state)
	sub := make([][]float32, chunks*k) // chunk c's state is sub[c*k : (c+1)*k]
	var wg sync.WaitGroup
	defer wg.Wait() // even if the caller's share panics
	for c := range chunks {
		lo, hi := c*n/chunks, (c+1)*n/chunks
		s := sub[c*k : (c+1)*k : (c+1)*k]
		for j := range state {
			s[j] = state[j][lo:hi]
		}
		if c == chunks-1 {
			r.Update(param[lo:hi], grad[lo:hi], s, step) // the caller's share
			break
		}
		wg.Go(func() { r.Update(param[lo:hi], grad[lo:hi], s, step) })
	}
}
