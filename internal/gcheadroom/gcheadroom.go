// Package gcheadroom bounds how far a process's heap may grow past its live
// data between two garbage collections.
//
// Go's collector runs when the heap has grown by GOGC percent (100 by
// default) of what the last collection found live. For a ps whose live heap
// is mostly one large sparse table, that lets as much garbage (the indexes
// a growing table has outgrown, request buffers) pile up as the table
// itself holds: its resident memory rises about twice as fast as its rows.
// Start sets the percent after every collection so that the next one comes
// after Headroom bytes of allocation, or MinPercent of the live heap where
// that is more, and never later than Go's default would. The table's data
// is pointer-free, so a collection over a large live heap costs little.
//
// Where GOGC or GOMEMLIMIT is set in the environment, the person running the
// process chose, and Start changes nothing.
package gcheadroom

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Config is the headroom kept.
type Config struct {
	Headroom   uint64 // bytes of allocation between collections, at least
	MinPercent int    // of the live heap, at least; 100 at most is ever set
}

// Percent is the GC percent for a live heap of live bytes: Headroom over
// live, at least MinPercent, at most 100 (Go's default).
func (c Config) Percent(live uint64) int {
	if live == 0 {
		return 100
	}
	p := c.Headroom * 100 / live
	return int(max(min(p, 100), uint64(max(c.MinPercent, 1))))
}

// Start keeps the headroom c from now on, re-reading the live heap after
// every collection, until stop is called. The setting is the process's:
// several Starts at once (ps run in one test process) share one hook, the
// first one's Config, and the last stop restores the percent found at the
// first Start. It does nothing where GOGC or GOMEMLIMIT is set.
func Start(c Config) (stop func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	mu.Lock()
	defer mu.Unlock()
	if users == 0 {
		h := &hook{c: c, set: -1}
		h.before = debug.SetGCPercent(100)
		debug.SetGCPercent(h.before)
		h.arm()
		active = h
	}
	users++
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			if users--; users == 0 {
				active.stopped.Store(true)
				debug.SetGCPercent(active.before)
				active = nil
			}
		})
	}
}

var (
	mu     sync.Mutex // guards users and active
	users  int        // Starts not yet stopped
	active *hook      // the hook while users > 0
)

// hook runs after each collection: the finalizer of an object dropped at
// once runs after the collection that found it unreachable, and arms the
// next one. It runs on the runtime's finalizer goroutine, so it only reads
// a metric and sets a number.
type hook struct {
	c       Config
	before  int
	set     int // the percent last set; -1 none yet
	stopped atomic.Bool
	sample  [1]metrics.Sample
}

type sentinel struct{ _ *byte } // a pointer: never a tiny allocation, whose finalizer may not run

func (h *hook) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		mu.Lock() // not while a stop restores the percent
		defer mu.Unlock()
		if h.stopped.Load() {
			return
		}
		h.tune()
		h.arm()
	})
}

func (h *hook) tune() {
	h.sample[0].Name = "/gc/heap/live:bytes"
	metrics.Read(h.sample[:])
	if h.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	if p := h.c.Percent(h.sample[0].Value.Uint64()); p != h.set {
		h.set = p
		debug.SetGCPercent(p)
	}
}
