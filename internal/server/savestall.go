package server

import (
	"fmt"
	"sync/atomic"
	"time"
)

// saveStalls measures what a save costs the pushes that arrive while it
// runs: how many there were, and the longest from the moment the ps took
// the request up to its lock's release (waiting for the lock, the update,
// a copy of the pages the cut shares), with the part of it spent waiting
// for the lock (the rest held it). The ps's "wrote" line reports it, so a
// job's log says whether training paused during a save and whether the
// pause was the cut's hold of the lock or the push's own work under it.
type saveStalls struct {
	saving  atomic.Int32 // saves under way
	pushes  atomic.Int64 // pushes that ended while one was
	longest atomic.Int64 // the longest of them, in nanoseconds
	waited  atomic.Int64 // of which the longest waited for the lock
}

// begin starts the count for a save.
func (st *saveStalls) begin() {
	if st.saving.Add(1) == 1 {
		st.pushes.Store(0)
		st.longest.Store(0)
		st.waited.Store(0)
	}
}

// end ends a save and says what the pushes meanwhile took.
func (st *saveStalls) end() string {
	n, d, w := st.pushes.Load(), time.Duration(st.longest.Load()), time.Duration(st.waited.Load())
	st.saving.Add(-1)
	if n == 0 {
		return "no push meanwhile"
	}
	return fmt.Sprintf("%d pushes meanwhile, the longest %s (%s of it waiting for the lock)", n,
		d.Round(10*time.Microsecond), w.Round(10*time.Microsecond))
}

// push records a push begun at start, which took the lock at locked and
// ends now. Pushes record under the server's lock, one at a time.
func (st *saveStalls) push(start, locked time.Time) {
	if st.saving.Load() == 0 {
		return
	}
	d := int64(time.Since(start))
	st.pushes.Add(1)
	if d > st.longest.Load() {
		st.longest.Store(d)
		st.waited.Store(int64(locked.Sub(start)))
	}
}
