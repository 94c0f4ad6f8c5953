package trainer

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
)

// requestHeadroom is the memory a ps with a disk tier is given beside its
// fixed cost and its budget, for the requests it serves at once (their
// keys, values and gradients decoded, the pulls' answers, the tier's
// lookups).
const requestHeadroom = 16 << 20

// limitMemory gives the Go runtime of a ps with a disk tier a soft memory
// limit (debug.SetMemoryLimit): the memory the runtime holds when the ps
// starts (its fixed cost), the budget for rows and the quarter the tier's
// memory bound lets them pass it by, and requestHeadroom. The collector
// then runs as often as it must to stay under it, rather than letting the
// heap grow to twice what is live (GOGC), and returns freed memory to the
// system, so the ps's resident memory follows the budget. A limit the
// process was given already (GOMEMLIMIT, or a program's own
// SetMemoryLimit) is left alone. Returns the limit set, 0 if none.
//
// The limit is the whole process's: a program that runs a ps beside other
// work (the Go API) and wants another limit, or none, sets GOMEMLIMIT
// (GOMEMLIMIT=off: none) or calls debug.SetMemoryLimit before RunPS.
func limitMemory(budget int64) int64 {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		return 0
	}
	limit := goMemory() + budget + budget/4 + requestHeadroom
	debug.SetMemoryLimit(limit)
	return limit
}

// goMemory is the memory the Go runtime holds from the system now, less
// what it has given back (the part of the process's resident memory the
// memory limit counts).
func goMemory() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
}
