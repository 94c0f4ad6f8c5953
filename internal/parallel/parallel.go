// Package parallel is the seam through which the deterministic cores
// (shard, table/sparse, optim) spread one large job over several cores
// without starting a goroutine themselves: a core asks a Runner, which its
// caller supplies, to run the pieces. The process's shell (package server)
// passes one that runs them on goroutines (package parallel/goroutines);
// tests and tools may pass Serial, which runs them one after another on
// the caller's goroutine, with the same result.
//
// A core's work split over a Runner gives the same result for any Width
// and any order of the pieces: the split only decides which core does
// which piece.
package parallel

// Runner runs the pieces of one job.
//
// Run calls f(0), f(1), ..., f(n-1), each once, and returns when every
// call has returned. Up to Width of the calls may run at once, on other
// goroutines, in any order; a piece that may fault or panic recovers on
// its own, as a goroutine's panic ends the process. Width is read anew by
// each job, so that it follows GOMAXPROCS.
type Runner interface {
	Width() int
	Run(n int, f func(i int))
}

// Serial runs every piece on the caller's goroutine, in order: Width 1.
var Serial Runner = serial{}

type serial struct{}

func (serial) Width() int { return 1 }

func (serial) Run(n int, f func(i int)) {
	for i := range n {
		f(i)
	}
}

// Or returns r, or Serial if r is nil.
func Or(r Runner) Runner {
	if r == nil {
		return Serial
	}
	return r
}
