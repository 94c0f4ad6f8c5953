// Package goroutines is the parallel.Runner of a process: it runs a job's
// pieces on goroutines, one per core. The shells (server, trainer) hand it
// to the deterministic cores, which start no goroutine of their own.
package goroutines

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/paramserv/paramserv/internal/parallel"
)

// OnCores returns a Runner as wide as GOMAXPROCS at each job's start.
// Run runs the pieces on up to Width goroutines, the caller's included,
// each taking the next piece not yet taken; it starts no goroutine for a
// job of one piece.
func OnCores() parallel.Runner { return width(0) }

// Width returns a Runner of width w whatever GOMAXPROCS says (at least 1),
// for benchmarks and tests that compare widths.
func Width(w int) parallel.Runner { return width(max(1, w)) }

// width is a Runner of its value's width, or GOMAXPROCS's if 0.
type width int

func (w width) Width() int {
	if w == 0 {
		return runtime.GOMAXPROCS(0)
	}
	return int(w)
}

func (w width) Run(n int, f func(i int)) {
	workers := min(w.Width(), n)
	if workers <= 1 {
		parallel.Serial.Run(n, f)
		return
	}
	var next atomic.Int64
	work := func() {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			f(i)
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait() // even if the caller's share panics
	for range workers - 1 {
		wg.Go(work)
	}
	work()
}
