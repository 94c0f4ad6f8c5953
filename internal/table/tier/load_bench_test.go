package tier

import (
	"runtime"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// benchLoad restores a table of 500k rows (Adagrad, dim 8: 72 bytes of
// key, values and state a row) from a snapshot, as a restore hands it
// over: all into memory (frac 0), or through Manager.Load with 1/frac of
// the rows' bytes as the budget. It reports rows/s and the heap the
// table holds once restored (the snapshot itself excluded).
//
//	go test -run XXX -bench Load -benchtime 3x ./internal/table/tier/
func benchLoad(b *testing.B, frac int) { benchLoadEngine(b, frac, "") }

func benchLoadEngine(b *testing.B, frac int, engine string) {
	rule, _ := optim.New(optim.Config{Name: "adagrad", LearningRate: 0.05})
	const rows, dim = 500_000, 8
	snap := sparse.Snapshot{Dim: dim, Keys: make([]uint64, rows), Values: make([]float32, rows*dim),
		State: [][]float32{make([]float32, rows*dim)}, LastTouch: make([]int64, rows)}
	for i := range snap.Keys {
		snap.Keys[i] = uint64(i)*7 + 1
		snap.LastTouch[i] = int64(i % 1000)
		for j := range dim {
			snap.Values[i*dim+j] = float32(i+j) * 1e-6
			snap.State[0][i*dim+j] = 0.1
		}
	}
	var heap uint64
	for b.Loop() {
		t, _ := sparse.New(sparse.Config{Dim: dim, Rule: rule})
		var m *Manager
		if frac > 0 {
			var err error
			m, err = Open(Config{Dir: b.TempDir() + "/s", Budget: int64(rows/frac) * (8 + 4*2*dim + 14), Engine: engine})
			if err != nil {
				b.Fatal(err)
			}
		}
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		if m != nil {
			if err := m.Load(t, snap, 1); err != nil {
				b.Fatal(err)
			}
		} else if err := t.Import(snap); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms1)
		heap = ms1.HeapInuse - min(ms0.HeapInuse, ms1.HeapInuse)
		runtime.KeepAlive(t)
		if m != nil {
			m.Close()
		}
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(heap)/(1<<20), "MiB-heap")
}

func BenchmarkLoadMemory(b *testing.B)      { benchLoad(b, 0) }
func BenchmarkLoadBudget10pct(b *testing.B) { benchLoad(b, 10) }
func BenchmarkLoadPebble10pct(b *testing.B) { benchLoadEngine(b, 10, EnginePebble) }
