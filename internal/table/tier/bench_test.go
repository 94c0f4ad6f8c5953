package tier

import (
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// zipfKeys are n batches of b keys each, power-law skewed over space.
func zipfKeys(n, b int, space uint64) [][]uint64 {
	rng := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(rng, 1.1, 1, space-1)
	out := make([][]uint64, n)
	for i := range out {
		ks := make([]uint64, b)
		for j := range ks {
			ks[j] = z.Uint64()*0x9E3779B97F4A7C15 + 1
		}
		out[i] = ks
	}
	return out
}

// benchTable pushes batches of keys (a pull and a push of each) through a
// table with 1/frac of its distinct keys' rows in memory (frac 0: no tier),
// with the background round every fourth batch, and reports keys/s, the
// hit rate of lookups on disk and the store's bytes per row on disk.
//
//	go test -run XXX -bench . -benchtime 200x ./internal/table/tier/
//
// With preload > 0 the table first holds preload rows (the keys the Zipf
// draws map to, the most likely first), of which 1/frac stay in memory: a
// table much larger than one batch's keys, as the tables are.
func benchTable(b *testing.B, frac, preload int) { benchEngine(b, frac, preload, "") }

func benchEngine(b *testing.B, frac, preload int, engine string) {
	rule, _ := optim.New(optim.Config{Name: "adagrad", LearningRate: 0.05})
	hot, _ := sparse.New(sparse.Config{Dim: 8, Rule: rule})
	const batch = 4096
	nb := 64
	if preload > 0 {
		nb = 256 // fewer repeats: a table this large sees new keys longer
	}
	batches := zipfKeys(nb, batch, 1<<22)
	distinct := map[uint64]bool{}
	for _, ks := range batches {
		for _, k := range ks {
			distinct[k] = true
		}
	}
	rows := max(len(distinct), preload)
	budget := -1
	if frac > 0 {
		budget = rows / frac
	}
	grads := make([]float32, batch*8)
	for i := range grads {
		grads[i] = 0.01
	}
	out := make([]float32, batch*8)
	var mu sync.Mutex
	var m *Manager
	if budget >= 0 {
		var err error
		m, err = Open(Config{Dir: b.TempDir() + "/s", Budget: int64(budget) * (8 + 4*16 + 14), Engine: engine})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		m.Attach([]string{"t"}, []*sparse.Table{hot})
	}
	for lo := 0; lo < preload; lo += 1 << 16 {
		ks := make([]uint64, 0, 1<<16)
		for z := lo; z < min(preload, lo+1<<16); z++ {
			ks = append(ks, uint64(z)*0x9E3779B97F4A7C15+1)
		}
		if err := hot.Push(ks, make([]float32, 8*len(ks)), 0); err != nil {
			b.Fatal(err)
		}
		if m != nil {
			if err := m.Round(&mu, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	}
	fetch := func(ks []uint64) {
		if m != nil {
			if err := m.tables[0].Fetch(ks); err != nil {
				b.Fatal(err)
			}
		}
	}
	step := func(i int) {
		ks := batches[i%len(batches)]
		mu.Lock()
		fetch(ks)
		_ = hot.Pull(ks, out)
		mu.Unlock()
		// The background round runs between a pull and its push, as
		// while a worker computes.
		if m != nil && i%4 == 3 {
			if err := m.round(&mu, time.Now(), true); err != nil {
				b.Fatal(err)
			}
		}
		mu.Lock()
		fetch(ks)
		_ = hot.Push(ks, grads, int64(i))
		mu.Unlock()
	}
	warm := 0
	if preload > 0 {
		// The rows in memory after the preload are arbitrary: let the
		// batches' hot keys come in first.
		warm = 64
		for i := range warm {
			step(i)
		}
		if m != nil {
			m.tables[0].stats = Stats{}
		}
	}
	written := func() uint64 {
		if m == nil || m.store.pebble == nil {
			return 0
		}
		tot := m.store.pebble.db.Metrics().Total()
		return tot.TableBytesCompacted + tot.TableBytesFlushed
	}
	if m != nil && m.store.pebble != nil {
		// The preload's compactions done, so that the batches measured
		// pay for their own.
		if err := m.store.pebble.db.Flush(); err != nil {
			b.Fatal(err)
		}
		for range 600 {
			if c := m.store.pebble.db.Metrics().Compact; c.NumInProgress == 0 && c.EstimatedDebt == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	written0 := written()
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step(warm + i)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "keys/s")
	// The process's CPU time, pebble's background work included: steadier
	// than the wall clock on a shared machine.
	b.ReportMetric(float64(b.N*batch)/(cpuTime()-cpu0).Seconds(), "keys/cpu_s")
	if m != nil {
		st := m.Stats()
		b.ReportMetric(float64(st.Hits)/float64(max(1, st.Lookups)), "hit/lookup")
		b.ReportMetric(float64(st.Filtered)/float64(max(1, st.Lookups)), "filtered/lookup")
		b.ReportMetric(float64(st.Promotions)/float64(b.N*batch), "promoted/key")
		b.ReportMetric(float64(st.HotRows), "hot_rows")
		b.ReportMetric(float64(st.DiskRows), "disk_rows")
		b.ReportMetric(float64(m.store.DiskBytes())/float64(max(1, st.DiskRows)), "disk_B/row")
		if m.store.pebble != nil {
			b.ReportMetric(float64(written()-written0)/float64(max(1, st.Demotions)), "written_B/demotion")
		}
		if h, ok := m.tables[0].rows.(*hashFile); ok {
			// The hash store's memory beside the budget: directory,
			// bitmaps and depths.
			b.ReportMetric(float64(4*len(h.dir)+9*len(h.occ)), "store_mem_B")
		}
	}
	b.ReportMetric(float64(len(distinct)), "distinct_keys")
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkMemory(b *testing.B)      { benchTable(b, 0, 0) }
func BenchmarkBudget10pct(b *testing.B) { benchTable(b, 10, 0) }
func BenchmarkBudget1pct(b *testing.B)  { benchTable(b, 100, 0) }

// A table of a million rows, 1/10 and 1/100 of them in memory: batches'
// keys are then a small part of the budget.
func BenchmarkLargeMemory(b *testing.B)      { benchTable(b, 0, 1<<20) }
func BenchmarkLargeBudget10pct(b *testing.B) { benchTable(b, 10, 1<<20) }
func BenchmarkLargeBudget1pct(b *testing.B)  { benchTable(b, 100, 1<<20) }

// The same over pebble, the other engine.
func BenchmarkLargePebble10pct(b *testing.B) { benchEngine(b, 10, 1<<20, EnginePebble) }
func BenchmarkLargePebble1pct(b *testing.B)  { benchEngine(b, 100, 1<<20, EnginePebble) }
