package trainer

import (
	"math"
	"runtime/debug"
	"testing"
)

// A ps with a disk tier gets a soft memory limit of its memory now, the
// budget and a quarter, and the headroom for requests; a limit set
// already (GOMEMLIMIT or the program's own) is left alone.
func TestLimitMemory(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	if prev != math.MaxInt64 {
		t.Skipf("this process has a memory limit already (%d)", prev)
	}
	const budget = 400 << 20
	got := limitMemory(budget)
	if min := int64(budget + budget/4 + requestHeadroom); got < min || got > min+goMemory()+64<<20 {
		t.Errorf("limit %d for a budget of %d, want the budget and a quarter, %d of headroom and the runtime's %d", got, budget, requestHeadroom, goMemory())
	}
	if now := debug.SetMemoryLimit(-1); now != got {
		t.Errorf("runtime's limit %d, want %d", now, got)
	}
	if again := limitMemory(budget); again != 0 {
		t.Errorf("a second call set %d over the limit already set", again)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "1GiB")
	if n := limitMemory(budget); n != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set, limitMemory set %d", n)
	}
}
