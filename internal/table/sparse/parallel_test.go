package sparse

import (
	"math/rand/v2"
	"os"
	"reflect"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/parallel"
	"github.com/paramserv/paramserv/internal/parallel/goroutines"
)

// TestMain runs the package's tests with tables whose large jobs run on
// four goroutines whatever the machine's cores, so that the race detector
// sees the parallel paths (the product's shell passes its own Runner), and
// whose indexes grow incrementally from 64 rows, so that the tests cross
// many incremental growths, and whose indexes from 4 KiB are mapped
// outside the Go heap and unmapped when replaced, so that a use of a freed
// index faults.
func TestMain(m *testing.M) {
	defaultRunner = goroutines.Width(4)
	incrementalFrom = 64
	mapIndexFrom = 4 << 10
	os.Exit(m.Run())
}

// TestRunnersAgree: a table's large jobs give the same bytes on the
// caller's goroutine alone (parallel.Serial, the default outside the ps)
// and spread over goroutines: Export, Sorted, Frozen, and Import into an
// empty table with its index built in parts.
func TestRunnersAgree(t *testing.T) {
	defer func(e, i, c int) { parallelExport, parallelIndex, parallelCheck = e, i, c }(parallelExport, parallelIndex, parallelCheck)
	parallelExport, parallelIndex, parallelCheck = 1<<10, 1<<10, 1<<8
	rule, err := optim.New(optim.Config{Name: "adagrad", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	const n, dim = 20000, 3
	keys := make([]uint64, n)
	grads := make([]float32, n*dim)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	for i := range grads {
		grads[i] = rng.Float32() - 0.5
	}
	build := func(run parallel.Runner) (Snapshot, Snapshot, Snapshot, Snapshot) {
		tb, err := New(Config{Dim: dim, Rule: rule})
		if err != nil {
			t.Fatal(err)
		}
		tb.SetParallel(run)
		if err := tb.Push(keys, grads, 1); err != nil {
			t.Fatal(err)
		}
		exported := tb.Export()
		restored, err := New(Config{Dim: dim, Rule: rule})
		if err != nil {
			t.Fatal(err)
		}
		restored.SetParallel(run)
		if err := restored.Import(exported); err != nil {
			t.Fatal(err)
		}
		return exported, tb.Sorted().Snapshot(), tb.Frozen().Export(), restored.Export()
	}
	e1, s1, f1, r1 := build(parallel.Serial)
	e2, s2, f2, r2 := build(goroutines.Width(3))
	for _, c := range []struct {
		name string
		a, b Snapshot
	}{{"Export", e1, e2}, {"Sorted", s1, s2}, {"Frozen", f1, f2}, {"Import", r1, r2}, {"Serial Export and Import", e1, r1}} {
		if !reflect.DeepEqual(c.a, c.b) {
			t.Errorf("%s: the serial and the parallel snapshots differ", c.name)
		}
	}
}
