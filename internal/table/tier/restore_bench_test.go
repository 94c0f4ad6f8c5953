package tier

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/vfs"
)

// BenchmarkStreamRestore restores a checkpoint of 1M rows (Adagrad, dim 8)
// into a disk tier of a tenth of its bytes, as a ps restores its own file
// (a stream of runs: LoadStream), and reports rows a second and the
// process's CPU a row.
//
//	go test -run XXX -bench StreamRestore -benchtime 3x ./internal/table/tier/
func BenchmarkStreamRestore(b *testing.B) {
	const rows, step = 1_000_000, 10_000
	rng := rand.New(rand.NewPCG(9, 9))
	keys := make([]uint64, rows)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	dir := b.TempDir()
	t := &testing.T{}
	m := writeCkpt(t, dir, step, -1, -1, []checkpoint.Shard{makeRows(rng, keys, step).shardOf(step, true, false, 0, nil)})
	c, err := m.Contents()
	if err != nil {
		b.Fatal(err)
	}
	budget := int64(rows) * (8 + 8*4*2 + 14) / 10
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var used time.Duration
	for b.Loop() {
		b.StopTimer()
		mgr, err := Open(Config{Dir: b.TempDir() + "/s", Budget: budget})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		c0 := cpu()
		_, err = shard.RestoreChainsInto(mgr, c, func(k int) (*checkpoint.Shard, error) {
			sh, err := checkpoint.ReadShard(vfs.OS, dir, m, k)
			return &sh, err
		}, nil, 0, 1, 1, nil)
		used += cpu() - c0
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		mgr.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(used.Nanoseconds())/1e3/float64(rows*b.N), "cpu-µs/row")
}
