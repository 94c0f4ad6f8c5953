package optim

import "github.com/paramserv/paramserv/internal/parallel"

// MinChunk is the fewest elements ApplyParallel gives one piece: below
// about this many, handing a piece to another core costs more than the
// update it runs.
const MinChunk = 64 << 10

// ApplyParallel is r.Update(param, grad, state, step) split into
// contiguous chunks of at least MinChunk elements, run by run on up to
// run.Width() cores at once (the package starts no goroutine: the caller's
// Runner does). It returns when every chunk is done, and makes one piece
// of a slice shorter than 2*MinChunk or of a Runner of Width 1 (nil is
// parallel.Serial). Because the rules are per-coordinate, the result is
// bit for bit that of one Update. A rule that is not (PerCoordinate false:
// LAMB) is given the whole slice in one Update on the caller's goroutine.
//
// As with Update, param, grad and each state slice must have the same length
// (ApplyParallel panics, before running any piece, if not), and nothing
// else may touch them until it returns.
func ApplyParallel(r Rule, param, grad []float32, state [][]float32, step int64, run parallel.Runner) {
	run = parallel.Or(run)
	n := len(param)
	chunks := min(run.Width(), n/MinChunk)
	if chunks < 2 || !PerCoordinate(r) {
		r.Update(param, grad, state, step)
		return
	}
	// Check here, on the caller's goroutine, so that a bad call panics
	// where it can be recovered rather than crashing a worker goroutine.
	checkLens(r.Name(), r.StateSlots(), param, grad, state)

	k := len(state)
	sub := make([][]float32, chunks*k) // chunk c's state is sub[c*k : (c+1)*k]
	run.Run(chunks, func(c int) {
		lo, hi := c*n/chunks, (c+1)*n/chunks
		s := sub[c*k : (c+1)*k : (c+1)*k]
		for j := range state {
			s[j] = state[j][lo:hi]
		}
		r.Update(param[lo:hi], grad[lo:hi], s, step)
	})
}
