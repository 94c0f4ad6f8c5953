package goroutines

import (
	"runtime"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/paramserv/paramserv/internal/parallel"
)

// TestRunEachOnce: Run calls every piece exactly once, for any width and
// number of pieces, and leaves no goroutine behind.
func TestRunEachOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, r := range []parallel.Runner{parallel.Serial, Width(1), Width(3), OnCores()} {
		for _, n := range []int{0, 1, 2, 7, 100} {
			calls := make([]atomic.Int32, n)
			r.Run(n, func(i int) { calls[i].Add(1) })
			for i := range calls {
				if c := calls[i].Load(); c != 1 {
					t.Errorf("width %d, %d pieces: piece %d ran %d times, want 1", r.Width(), n, i, c)
				}
			}
		}
	}
}

// TestRunWidth: no more than Width pieces run at once, and Width pieces
// do run at once when there are as many.
func TestRunWidth(t *testing.T) {
	const w = 3
	var running, most atomic.Int32
	arrived := make(chan struct{})
	var count atomic.Int32
	Width(w).Run(w, func(int) {
		now := running.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		if count.Add(1) == w {
			close(arrived)
		}
		<-arrived // every piece waits for all w: they must run at once
		running.Add(-1)
	})
	if got := most.Load(); got != w {
		t.Errorf("%d pieces ran at once, want %d", got, w)
	}
}

// TestOnCoresWidth: OnCores is as wide as GOMAXPROCS, read at each job.
func TestOnCoresWidth(t *testing.T) {
	if got, want := OnCores().Width(), runtime.GOMAXPROCS(0); got != want {
		t.Errorf("OnCores().Width() = %d, want GOMAXPROCS = %d", got, want)
	}
	if got := Width(0).Width(); got != 1 {
		t.Errorf("Width(0).Width() = %d, want 1", got)
	}
}
