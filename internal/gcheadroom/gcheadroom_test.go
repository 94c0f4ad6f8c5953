package gcheadroom

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestPercent(t *testing.T) {
	c := Config{Headroom: 16 << 20, MinPercent: 5}
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{1 << 20, 100},         // a small heap: Go's default
		{16 << 20, 100},        // headroom equal to the heap
		{64 << 20, 25},         // 16 MiB of 64
		{160 << 20, 10},        // 16 MiB of 160
		{1 << 30, 5},           // the floor
		{^uint64(0) / 1000, 5}, // no overflow
	} {
		if got := c.Percent(tc.live); got != tc.want {
			t.Errorf("Percent(%d) = %d, want %d", tc.live, got, tc.want)
		}
	}
}

// After a collection over a live heap far larger than the headroom, the
// percent is the headroom's share of it; stop puts back the one before.
func TestStartTunesAfterACollection(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	live := make([]byte, 256<<20) // pointer-free, as a table's rows are
	stop := Start(Config{Headroom: 16 << 20, MinPercent: 1})
	for range 3 { // the finalizer runs after the collection, then arms the next
		runtime.GC()
		runtime.Gosched()
	}
	var got int
	for range 100 {
		runtime.GC()
		if got = debug.SetGCPercent(-1); got != 100 {
			debug.SetGCPercent(got)
			break
		}
		debug.SetGCPercent(got)
		runtime.Gosched()
	}
	runtime.KeepAlive(live)
	if got < 1 || got > 7 {
		t.Errorf("GC percent %d with 16 MiB of headroom over a 256 MiB live heap, want about 6", got)
	}
	stop()
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("after stop: GC percent %d, want the 100 from before Start", p)
	}
}

// Overlapping Starts share the setting; the last stop restores the
// percent from before the first.
func TestOverlappingStarts(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetGCPercent(80)
	defer debug.SetGCPercent(before)
	stop1 := Start(Config{Headroom: 1, MinPercent: 3})
	stop2 := Start(Config{Headroom: 1, MinPercent: 3})
	stop1()
	stop1() // twice: no effect
	runtime.GC()
	runtime.GC()
	stop2()
	if p := debug.SetGCPercent(80); p != 80 {
		t.Errorf("after the last stop: GC percent %d, want the 80 from before the first Start", p)
	}
}
