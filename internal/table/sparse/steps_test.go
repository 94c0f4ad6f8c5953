package sparse

import (
	"math"
	"slices"
	"testing"
)

// lastTouch returns each key's last-touched step as All reports it.
func lastTouch(tb *Table) map[uint64]int64 {
	m := map[uint64]int64{}
	for r := range tb.All() {
		m[r.Key] = r.LastTouch
	}
	return m
}

func keysOf(tb *Table) []uint64 { return tb.Export().Keys }

func mustTable(t *testing.T, cfg Config) *Table {
	t.Helper()
	tb, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// TestImportStamps: Import stamps rows without a LastTouch with the latest
// step the table has seen, moves that step forward to the newest LastTouch
// it imports (so rows Pull creates after a restore are not born old), and
// records a LastTouch older than the table can represent as the oldest step
// it can.
func TestImportStamps(t *testing.T) {
	cfg := Config{Dim: 1, Rule: plainRule{0}, EvictAfterSteps: 10}
	one := func(key uint64, touch []int64) Snapshot {
		return Snapshot{Dim: 1, Keys: []uint64{key}, Values: []float32{1}, LastTouch: touch}
	}

	t.Run("nil LastTouch", func(t *testing.T) {
		tb := mustTable(t, cfg)
		tb.Push([]uint64{1}, []float32{1}, 0)
		tb.Push([]uint64{2}, []float32{1}, 50)
		if err := tb.Import(one(3, nil)); err != nil {
			t.Fatal(err)
		}
		if got := lastTouch(tb)[3]; got != 50 {
			t.Errorf("imported row stamped %d, want 50 (the latest step seen)", got)
		}
		// cutoff 45: key 1 goes, the imported row stays.
		if n := tb.Evict(55); n != 1 || !slices.Equal(keysOf(tb), []uint64{2, 3}) {
			t.Errorf("Evict(55) dropped %d, kept %v; want 1, [2 3]", n, keysOf(tb))
		}
	})

	t.Run("clock follows LastTouch", func(t *testing.T) {
		tb := mustTable(t, cfg)
		s := Snapshot{Dim: 1, Keys: []uint64{1, 2}, Values: []float32{1, 1}, LastTouch: []int64{50, 100}}
		if err := tb.Import(s); err != nil {
			t.Fatal(err)
		}
		tb.Pull([]uint64{3}, make([]float32, 1))
		if got := lastTouch(tb)[3]; got != 100 {
			t.Errorf("row created by Pull after Import stamped %d, want 100 (the newest imported step)", got)
		}
		// cutoff 95: only key 1, touched at 50, goes.
		if n := tb.Evict(105); n != 1 || !slices.Equal(keysOf(tb), []uint64{2, 3}) {
			t.Errorf("Evict(105) dropped %d, kept %v; want 1, [2 3]", n, keysOf(tb))
		}
	})

	t.Run("older than the base", func(t *testing.T) {
		tb := mustTable(t, cfg)
		tb.Push([]uint64{1}, []float32{1}, 100)
		tb.Push([]uint64{2}, []float32{1}, 195)
		if n := tb.Evict(200); n != 1 { // cutoff 190: the oldest step kept
			t.Fatalf("Evict(200) dropped %d, want 1", n)
		}
		if err := tb.Import(one(3, []int64{50})); err != nil {
			t.Fatal(err)
		}
		if got := lastTouch(tb)[3]; got != 190 {
			t.Errorf("row last touched at 50 recorded as %d, want 190 (the oldest step the table represents)", got)
		}
	})
}

// TestStepsPast32Bits: touches are stored as 32-bit offsets from a base
// that follows the rows, so steps past 2^32 are exact as long as the rows
// are not 2^32 steps apart, whether the rows come from Push, from Import
// with or without LastTouch; and a row touched more than 2^32 steps after
// the base is never taken for an old one.
func TestStepsPast32Bits(t *testing.T) {
	cfg := Config{Dim: 1, Rule: plainRule{0}, EvictAfterSteps: 5}
	const big = int64(1) << 33

	tb := mustTable(t, cfg)
	tb.Push([]uint64{1}, []float32{1}, big)
	if got := lastTouch(tb)[1]; got != big {
		t.Errorf("Push at 2^33: last touch %d, want %d", got, big)
	}

	tb = mustTable(t, cfg)
	if err := tb.Import(Snapshot{Dim: 1, Keys: []uint64{1}, Values: []float32{1}, LastTouch: []int64{big}}); err != nil {
		t.Fatal(err)
	}
	if got := lastTouch(tb)[1]; got != big {
		t.Errorf("Import of a row touched at 2^33: last touch %d, want %d", got, big)
	}

	tb = mustTable(t, cfg)
	tb.Evict(big) // no rows: only the clock moves
	if err := tb.Import(Snapshot{Dim: 1, Keys: []uint64{1}, Values: []float32{1}}); err != nil {
		t.Fatal(err)
	}
	if got := lastTouch(tb)[1]; got != big {
		t.Errorf("Import without LastTouch after Evict(2^33): last touch %d, want %d", got, big)
	}

	tb = mustTable(t, cfg)
	tb.Push([]uint64{1}, []float32{1}, 0)
	late := int64(1)<<32 + 10
	tb.Push([]uint64{2}, []float32{1}, late)
	if n := tb.Evict(late); n != 1 || !slices.Equal(keysOf(tb), []uint64{2}) {
		t.Errorf("Evict(2^32+10) dropped %d, kept %v; want 1, [2]: key 2 was pushed at that step", n, keysOf(tb))
	}
}

// TestUpdateCountSaturates: a row's update count stops at 2^32-1 rather
// than wrapping to 0 (which would hand the rule step 0).
func TestUpdateCountSaturates(t *testing.T) {
	tb := mustTable(t, Config{Dim: 1, Rule: stepRule{}})
	s := Snapshot{Dim: 1, Keys: []uint64{1}, Values: []float32{0},
		State: [][]float32{{0.5}, {0}}, Updates: []uint32{math.MaxUint32}}
	if err := tb.Import(s); err != nil {
		t.Fatal(err)
	}
	tb.Push([]uint64{1}, []float32{1}, 1)
	if got := tb.Export().Updates[0]; got != math.MaxUint32 {
		t.Errorf("update count after a push at the maximum: %d, want %d", got, uint32(math.MaxUint32))
	}
}

// upperRule names a step-free rule in capitals and does not implement
// StepUser.
type upperRule struct{ name string }

func (r upperRule) Name() string                                { return r.name }
func (upperRule) StateSlots() int                               { return 0 }
func (upperRule) InitState([][]float32)                         {}
func (upperRule) Update(p, g []float32, _ [][]float32, _ int64) {}

// TestStepUseIgnoresCase: the rule names known not to read step match
// whatever their case, as optim.New's names do.
func TestStepUseIgnoresCase(t *testing.T) {
	for name, want := range map[string]bool{"FTRL": false, "Sgd": false, "ADAM": true} {
		if tb := mustTable(t, Config{Dim: 1, Rule: upperRule{name}}); tb.keepCount != want {
			t.Errorf("rule %q: keeps update counts %v, want %v", name, tb.keepCount, want)
		}
	}
}

// TestRandomUniformBelowMax: values stay below Max even where rounding to
// float32 would reach it: with Max the next float32 after Min, about half
// the draws round up to Max and must come back to Min.
func TestRandomUniformBelowMax(t *testing.T) {
	for _, lo := range []float32{1, -1, 1000} {
		hi := math.Nextafter32(lo, float32(math.Inf(1)))
		init := RandomUniform{Min: lo, Max: hi, Seed: 5}
		row := make([]float32, 8)
		for k := range uint64(200) {
			init.Init(k, row)
			for _, v := range row {
				if v != lo {
					t.Fatalf("RandomUniform[%v, %v) drew %v for key %d", lo, hi, v, k)
				}
			}
		}
	}
}
