package sparse

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/paramserv/paramserv/internal/mix"
	"github.com/paramserv/paramserv/internal/optim"
)

// op is one step of a model-based test.
type op struct {
	kind  byte // 'l' pull, 'p' push, 'e' evict, 'x' export+import into a fresh table
	keys  []uint64
	grads []float32
	step  int64
}

// runOp applies o to the table and the reference and fails on any
// difference in what they answer or hold. It returns the table to continue
// with (a fresh one after 'x').
func runOp(t testing.TB, tb *Table, ref *refTable, o op) *Table {
	t.Helper()
	switch o.kind {
	case 'l':
		out := make([]float32, len(o.keys)*tb.Dim())
		if err := tb.Pull(o.keys, out); err != nil {
			t.Fatal(err)
		}
		if want := ref.pull(o.keys); !bitsEqual(out, want) {
			t.Fatalf("pull %v:\n got %v\nwant %v", o.keys, out, want)
		}
	case 'p':
		if err := tb.Push(o.keys, o.grads, o.step); err != nil {
			t.Fatal(err)
		}
		ref.push(o.keys, o.grads, o.step)
	case 'e':
		if got, want := tb.Evict(o.step), ref.evict(o.step); got != want {
			t.Fatalf("Evict(%d) = %d, want %d", o.step, got, want)
		}
	case 'x':
		snap := tb.Export()
		fresh, err := New(ref.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := fresh.Import(snap); err != nil {
			t.Fatal(err)
		}
		// Carry the counters and the sketch over, as a test convenience:
		// the reference does not forget sightings on restore.
		st := tb.stats
		fresh.stats = st
		fresh.clock = tb.clock
		fresh.sketch = tb.sketch
		tb = fresh
	}
	if got, want := statsOf(tb.Stats()), ref.statsNow(); got != want {
		t.Fatalf("after %c: stats\n got %+v\nwant %+v", o.kind, got, want)
	}
	return tb
}

// checkSame fails unless the table holds exactly the reference's rows.
func checkSame(t testing.TB, tb *Table, ref *refTable) {
	t.Helper()
	if d := diffSnapshots(tb.Export(), ref.export()); d != "" {
		t.Fatalf("table differs from reference: %s", d)
	}
	checkIndex(t, tb)
}

// randomOps draws n operations over pool.
func randomOps(rng *rand.Rand, pool []uint64, dim, n int) []op {
	var ops []op
	step := int64(0)
	for range n {
		switch x := rng.IntN(100); {
		case x < 45:
			keys := make([]uint64, rng.IntN(12))
			for i := range keys {
				keys[i] = pool[rng.IntN(len(pool))]
			}
			ops = append(ops, op{kind: 'l', keys: keys})
		case x < 92:
			step += int64(rng.IntN(3))
			perm := rng.Perm(len(pool))[:rng.IntN(12)]
			keys := make([]uint64, len(perm))
			for i, j := range perm {
				keys[i] = pool[j]
			}
			grads := make([]float32, len(keys)*dim)
			for i := range grads {
				grads[i] = float32(rng.NormFloat64())
			}
			ops = append(ops, op{kind: 'p', keys: keys, grads: grads, step: step})
		case x < 98:
			step += int64(rng.IntN(4))
			ops = append(ops, op{kind: 'e', step: step})
		default:
			ops = append(ops, op{kind: 'x'})
		}
	}
	return ops
}

// referenceConfigs is the spread of configurations the tests against the
// map-based reference run: plain, admission by count, eviction, both with
// random initial values, and a row cap.
func referenceConfigs() []Config {
	return []Config{
		{Dim: 1},
		{Dim: 3, MinCount: 3, SketchWidth: 1 << 14},
		{Dim: 2, EvictAfterSteps: 5},
		{Dim: 4, MinCount: 2, SketchWidth: 1 << 14, EvictAfterSteps: 3, Init: RandomNormal{Stddev: 0.1, Seed: 7}},
		{Dim: 1, MaxRows: 40, EvictAfterSteps: 8, Init: RandomUniform{Min: -1, Max: 1, Seed: 3}},
	}
}

// TestAgainstReference runs random pulls, pushes, evictions and
// checkpoint round trips against the map-based reference, for every rule and
// a spread of configurations.
func TestAgainstReference(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 600
	}
	configs := referenceConfigs()
	for _, rule := range testRules(t) {
		for ci, cfg := range configs {
			cfg.Rule = rule
			t.Run(fmt.Sprintf("%s/%d", rule.Name(), ci), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ci), 1))
				pool := keyPool(t, 150, 1<<14, uint64(ci))
				tb, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				ref := newRef(cfg)
				for i, o := range randomOps(rng, pool, cfg.Dim, n) {
					tb = runOp(t, tb, ref, o)
					if i%97 == 0 {
						checkSame(t, tb, ref)
					}
				}
				checkSame(t, tb, ref)
			})
		}
	}
}

// TestDenseEquivalent checks that a table with keys 0..n-1, pushed every
// key every step, holds exactly what the rule computes over one dense
// slice: the table's per-row slicing and state layout change nothing.
func TestDenseEquivalent(t *testing.T) {
	const n, dim, steps = 300, 5, 20
	init := RandomNormal{Stddev: 0.3, Seed: 11}
	for _, rule := range testRules(t) {
		if !optim.PerCoordinate(rule) {
			continue // LAMB's trust ratio is per row in a table, per variable dense (the reference tests cover it)
		}
		t.Run(rule.Name(), func(t *testing.T) {
			tb, err := New(Config{Dim: dim, Rule: rule, Init: init})
			if err != nil {
				t.Fatal(err)
			}
			param := make([]float32, n*dim)
			for k := range n {
				init.Init(uint64(k), param[k*dim:(k+1)*dim])
			}
			state := make([][]float32, rule.StateSlots())
			for i := range state {
				state[i] = make([]float32, n*dim)
			}
			rule.InitState(state)
			rng := rand.New(rand.NewPCG(5, 5))
			grad := make([]float32, n*dim)
			for step := 1; step <= steps; step++ {
				for i := range grad {
					grad[i] = float32(rng.NormFloat64())
				}
				rule.Update(param, grad, state, int64(step))
				// The table gets the same gradients, keys in a new order.
				perm := rng.Perm(n)
				keys := make([]uint64, n)
				grads := make([]float32, n*dim)
				for i, k := range perm {
					keys[i] = uint64(k)
					copy(grads[i*dim:], grad[k*dim:(k+1)*dim])
				}
				if err := tb.Push(keys, grads, int64(step)); err != nil {
					t.Fatal(err)
				}
			}
			s := tb.Export()
			if len(s.Keys) != n {
				t.Fatalf("%d rows, want %d", len(s.Keys), n)
			}
			if !bitsEqual(s.Values, param) {
				t.Fatalf("values differ from dense:\n got %v\nwant %v", head(s.Values), head(param))
			}
			for i := range state {
				if !bitsEqual(s.State[i], state[i]) {
					t.Fatalf("state %d differs from dense", i)
				}
			}
		})
	}
}

// TestGrowth inserts keys across many index resizes and page allocations,
// checking the index and a sample of values along the way.
func TestGrowth(t *testing.T) {
	n := 300_000
	if testing.Short() {
		n = 60_000
	}
	tb, err := New(Config{Dim: 2, Rule: plainRule{1}, Init: RandomUniform{Min: -1, Max: 1, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = mix.Murmur3(uint64(i)) // spread over the whole key space
	}
	out := make([]float32, 2*1000)
	want := make([]float32, 2)
	resizes := 0
	for i := 0; i < n; i += 1000 {
		nb := tb.nBuckets
		if err := tb.Pull(keys[i:i+1000], out); err != nil {
			t.Fatal(err)
		}
		if tb.nBuckets != nb {
			resizes++
		}
		if got := tb.Len(); got != i+1000 {
			t.Fatalf("Len = %d, want %d", got, i+1000)
		}
		if i%(n/10) == 0 {
			checkIndex(t, tb)
		}
	}
	checkIndex(t, tb)
	if resizes < 10 {
		t.Errorf("only %d resizes seen; the test should cross many", resizes)
	}
	load := float64(tb.Len()) / float64(len(tb.index))
	if load < growLoad-0.01 || load > maxLoad {
		t.Errorf("index load %.3f outside [%v, %v]", load, growLoad, maxLoad)
	}
	for i := 0; i < n; i += 997 {
		r, _ := tb.find(keys[i], hashKey(keys[i]))
		if r < 0 {
			t.Fatalf("key %d lost", keys[i])
		}
		p := &tb.pages[r>>tb.pageShift]
		o := r & tb.pageMask
		tb.init.Init(keys[i], want)
		if !bitsEqual(p.data[o*tb.stride:o*tb.stride+2], want) {
			t.Fatalf("key %d: value %v, want %v", keys[i], p.data[o*tb.stride:o*tb.stride+2], want)
		}
	}
	if got, raw := tb.MemoryBytes(), int64(n)*(8+8+8); got > raw*3/2 {
		t.Errorf("MemoryBytes %d for %d rows, more than 1.5x raw %d", got, n, raw)
	}
}

// TestDeleteKeepsIndex evicts rows one by one and in bulk from small and
// mid-sized tables (whose clusters wrap around the end of the index) and
// checks the probing invariant and every lookup after each round.
func TestDeleteKeepsIndex(t *testing.T) {
	for _, n := range []int{10, 14, 40, 500, 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 2))
			tb, err := New(Config{Dim: 1, Rule: plainRule{0}, EvictAfterSteps: 1})
			if err != nil {
				t.Fatal(err)
			}
			ref := newRef(tb.cfgForRef())
			step := int64(0)
			for round := range 30 {
				// Touch a random subset; the rest become old.
				keys := make([]uint64, 0, n)
				for range n {
					if rng.IntN(3) > 0 {
						keys = append(keys, rng.Uint64N(uint64(4*n)))
					}
				}
				slices.Sort(keys)
				keys = slices.Compact(keys)
				grads := make([]float32, len(keys))
				step += 1 + int64(round%3)
				runOp(t, tb, ref, op{kind: 'p', keys: keys, grads: grads, step: step})
				runOp(t, tb, ref, op{kind: 'e', step: step + int64(rng.IntN(3))})
				checkSame(t, tb, ref)
			}
		})
	}
}

// cfgForRef rebuilds the Config a table was made from.
func (t *Table) cfgForRef() Config {
	return Config{Dim: t.dim, Rule: t.rule, Init: t.init, MinCount: t.minCount, EvictAfterSteps: t.evictAfter, MaxRows: t.maxRows}
}

// TestInitDeterminism: a row's initial value depends on (seed, key) only,
// not on arrival order, sharding, or admission.
func TestInitDeterminism(t *testing.T) {
	inits := []Initializer{
		RandomNormal{Stddev: 0.05, Seed: 42},
		RandomNormal{Mean: 1, Stddev: 2, Seed: 42, Truncated: true},
		RandomUniform{Min: -0.1, Max: 0.1, Seed: 9},
	}
	keys := make([]uint64, 2000)
	for i := range keys {
		keys[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	for _, init := range inits {
		t.Run(fmt.Sprintf("%T", init), func(t *testing.T) {
			const dim = 8
			rule := plainRule{0}
			want := make([]float32, len(keys)*dim)
			for i, k := range keys {
				init.Init(k, want[i*dim:(i+1)*dim])
			}
			// One table, keys in order.
			a, _ := New(Config{Dim: dim, Rule: rule, Init: init})
			// One table, keys in reverse.
			b, _ := New(Config{Dim: dim, Rule: rule, Init: init})
			// Three shards, keys by key%3, in random order.
			var shards [3]*Table
			for i := range shards {
				shards[i], _ = New(Config{Dim: dim, Rule: rule, Init: init})
			}
			// A table that never admits: values are read, not stored.
			c, _ := New(Config{Dim: dim, Rule: rule, Init: init, MinCount: 200, SketchWidth: 1 << 10})

			out := make([]float32, len(keys)*dim)
			if err := a.Pull(keys, out); err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(out, want) {
				t.Fatal("in-order pull differs from Init")
			}
			rev := slices.Clone(keys)
			slices.Reverse(rev)
			if err := b.Pull(rev, out); err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(out, reverseRows(want, dim)) {
				t.Fatal("reverse-order pull differs from Init")
			}
			if err := c.Pull(keys, out); err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(out, want) || c.Len() != 0 {
				t.Fatalf("not-admitted pull differs from Init (or stored %d rows)", c.Len())
			}
			rng := rand.New(rand.NewPCG(1, 1))
			one := make([]float32, dim)
			for _, i := range rng.Perm(len(keys)) {
				if err := shards[keys[i]%3].Pull(keys[i:i+1], one); err != nil {
					t.Fatal(err)
				}
				if !bitsEqual(one, want[i*dim:(i+1)*dim]) {
					t.Fatalf("sharded pull of %d differs from Init", keys[i])
				}
			}
			if d := diffSnapshots(a.Export(), b.Export()); d != "" {
				t.Fatalf("in-order and reverse tables differ: %s", d)
			}
		})
	}
}

func reverseRows(v []float32, dim int) []float32 {
	out := make([]float32, 0, len(v))
	for i := len(v)/dim - 1; i >= 0; i-- {
		out = append(out, v[i*dim:(i+1)*dim]...)
	}
	return out
}

// TestInitDistributions is a loose sanity check of the random initializers'
// moments and ranges.
func TestInitDistributions(t *testing.T) {
	const n = 50_000
	row := make([]float32, 4)
	moments := func(init Initializer) (mean, std, lo, hi float64) {
		lo, hi = math.Inf(1), math.Inf(-1)
		var s, s2 float64
		for k := range uint64(n / 4) {
			init.Init(k, row)
			for _, v := range row {
				x := float64(v)
				s += x
				s2 += x * x
				lo, hi = min(lo, x), max(hi, x)
			}
		}
		mean = s / n
		return mean, math.Sqrt(s2/n - mean*mean), lo, hi
	}
	if m, s, _, _ := moments(RandomNormal{Mean: 1, Stddev: 2, Seed: 1}); math.Abs(m-1) > 0.05 || math.Abs(s-2) > 0.05 {
		t.Errorf("RandomNormal{1, 2}: mean %.3f std %.3f", m, s)
	}
	if _, _, lo, hi := moments(RandomNormal{Stddev: 1, Seed: 1, Truncated: true}); lo < -2 || hi > 2 {
		t.Errorf("truncated normal drew outside [-2, 2]: [%v, %v]", lo, hi)
	}
	if m, _, lo, hi := moments(RandomUniform{Min: 2, Max: 3, Seed: 1}); lo < 2 || hi >= 3 || math.Abs(m-2.5) > 0.01 {
		t.Errorf("RandomUniform[2, 3): range [%v, %v], mean %.3f", lo, hi, m)
	}
}

// TestExportImport checks that a snapshot restores a table bit for bit,
// that training the restored table goes on exactly as the original, and
// that Import into a non-empty table overwrites and adds.
func TestExportImport(t *testing.T) {
	for _, rule := range testRules(t) {
		t.Run(rule.Name(), func(t *testing.T) {
			cfg := Config{Dim: 3, Rule: rule, EvictAfterSteps: 50, Init: RandomNormal{Stddev: 0.1, Seed: 3}}
			a, _ := New(cfg)
			rng := rand.New(rand.NewPCG(3, 3))
			pool := keyPool(t, 400, 1<<12, 3)
			ops := randomOps(rng, pool, 3, 400)
			ref := newRef(cfg)
			for _, o := range ops {
				if o.kind != 'x' {
					runOp(t, a, ref, o)
				}
			}
			snap := a.Export()
			if len(snap.Keys) == 0 {
				t.Fatal("empty table; the test needs rows")
			}
			b, _ := New(cfg)
			if err := b.Import(snap); err != nil {
				t.Fatal(err)
			}
			if d := diffSnapshots(b.Export(), snap); d != "" {
				t.Fatalf("round trip differs: %s", d)
			}
			checkIndex(t, b)
			// Both go on identically.
			for _, o := range randomOps(rng, pool, 3, 200) {
				switch o.kind {
				case 'p':
					_ = a.Push(o.keys, o.grads, o.step+1000)
					_ = b.Push(o.keys, o.grads, o.step+1000)
				case 'e':
					if x, y := a.Evict(o.step+1000), b.Evict(o.step+1000); x != y {
						t.Fatalf("Evict: original %d, restored %d", x, y)
					}
				}
			}
			if d := diffSnapshots(b.Export(), a.Export()); d != "" {
				t.Fatalf("restored table diverged: %s", d)
			}
			// Import into a non-empty table: half the keys overwritten, the
			// rest added.
			c, _ := New(cfg)
			half := Snapshot{Dim: 3, Keys: snap.Keys[:len(snap.Keys)/2]}
			half.Values = make([]float32, len(half.Keys)*3) // zeros, to be overwritten
			for range snap.State {
				half.State = append(half.State, make([]float32, len(half.Keys)*3))
			}
			if err := c.Import(half); err != nil {
				t.Fatal(err)
			}
			if err := c.Import(snap); err != nil {
				t.Fatal(err)
			}
			if d := diffSnapshots(c.Export(), snap); d != "" {
				t.Fatalf("import over a half-filled table differs: %s", d)
			}
			if got := c.Stats().Imported; got != int64(len(snap.Keys)) {
				t.Fatalf("Imported = %d, want %d", got, len(snap.Keys))
			}
		})
	}
}

// TestImportErrors: a bad snapshot is refused whole, with a message saying
// what is wrong, and leaves the table unchanged.
func TestImportErrors(t *testing.T) {
	cfg := Config{Dim: 2, Rule: plainRule{1}, MaxRows: 3}
	good := func() Snapshot {
		return Snapshot{Dim: 2, Keys: []uint64{1, 5, 9}, Values: make([]float32, 6), State: [][]float32{make([]float32, 6)}}
	}
	cases := map[string]struct {
		edit func(*Snapshot)
		want error
	}{
		"dim":          {func(s *Snapshot) { s.Dim = 3 }, ErrSnapshot},
		"values":       {func(s *Snapshot) { s.Values = s.Values[:5] }, ErrSnapshot},
		"slots":        {func(s *Snapshot) { s.State = nil }, ErrSnapshot},
		"state length": {func(s *Snapshot) { s.State[0] = s.State[0][:4] }, ErrSnapshot},
		"updates":      {func(s *Snapshot) { s.Updates = []uint32{1} }, ErrSnapshot},
		"last touch":   {func(s *Snapshot) { s.LastTouch = []int64{1, 2} }, ErrSnapshot},
		"unsorted":     {func(s *Snapshot) { s.Keys[1], s.Keys[2] = 9, 5 }, ErrSnapshot},
		"duplicate":    {func(s *Snapshot) { s.Keys[2] = 5 }, ErrSnapshot},
		"full": {func(s *Snapshot) {
			s.Keys = append(s.Keys, 10)
			s.Values = append(s.Values, 0, 0)
			s.State[0] = append(s.State[0], 0, 0)
		}, ErrFull},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			tb, _ := New(cfg)
			if err := tb.Pull([]uint64{1}, make([]float32, 2)); err != nil {
				t.Fatal(err)
			}
			before := tb.Export()
			s := good()
			c.edit(&s)
			err := tb.Import(s)
			if !errors.Is(err, c.want) {
				t.Fatalf("Import: %v, want %v", err, c.want)
			}
			t.Log(err)
			if d := diffSnapshots(tb.Export(), before); d != "" {
				t.Fatalf("failed Import changed the table: %s", d)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	rule := plainRule{0}
	for _, cfg := range []Config{
		{Dim: 0, Rule: rule},
		{Dim: MaxDim + 1, Rule: rule},
		{Dim: 1},
		{Dim: 1, Rule: rule, MinCount: -1},
		{Dim: 1, Rule: rule, MinCount: 256},
		{Dim: 1, Rule: rule, SketchWidth: -1},
		{Dim: 1, Rule: rule, EvictAfterSteps: -1},
		{Dim: 1, Rule: rule, MaxRows: -1},
		{Dim: 1, Rule: rule, Init: RandomNormal{Stddev: -1}},
		{Dim: 1, Rule: rule, Init: RandomNormal{Stddev: float32(math.NaN())}},
		{Dim: 1, Rule: rule, Init: RandomUniform{Min: 1, Max: 0}},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		} else {
			t.Log(err)
		}
	}
}

func TestShapeErrors(t *testing.T) {
	tb, _ := New(Config{Dim: 2, Rule: plainRule{0}})
	if err := tb.Pull([]uint64{1, 2}, make([]float32, 3)); !errors.Is(err, ErrShape) {
		t.Errorf("Pull: %v, want ErrShape", err)
	}
	if err := tb.Push([]uint64{1, 2}, make([]float32, 5), 1); !errors.Is(err, ErrShape) {
		t.Errorf("Push: %v, want ErrShape", err)
	}
	if tb.Len() != 0 {
		t.Errorf("a refused call created %d rows", tb.Len())
	}
}

// TestSketchNeverUndercounts: with many more keys than counters the
// estimate over-counts, but never under-counts.
func TestSketchNeverUndercounts(t *testing.T) {
	s := newSketch(64)
	rng := rand.New(rand.NewPCG(8, 8))
	truth := map[uint64]int{}
	over := 0
	for range 5000 {
		k := rng.Uint64N(400)
		truth[k]++
		s.see(k, 255)
	}
	for k, n := range truth {
		est := s.estimate(k)
		if est < min(n, 255) {
			t.Fatalf("key %d seen %d times, estimate %d", k, n, est)
		}
		if est > n {
			over++
		}
	}
	if over == 0 {
		t.Error("no over-count at 400 keys in 64 counters: is the sketch hashing?")
	}
}

// TestStepUse: update counts are kept exactly for rules that read step.
func TestStepUse(t *testing.T) {
	for _, name := range optim.Names() {
		r, err := optim.New(optim.Config{Name: name, LearningRate: 0.1})
		if err != nil {
			t.Fatal(err)
		}
		tb, _ := New(Config{Dim: 1, Rule: r})
		if want := name == "adam" || name == "adamw" || name == "lamb" || name == "adagrad_da"; tb.keepCount != want {
			t.Errorf("%s: keeps update counts %v, want %v", name, tb.keepCount, want)
		}
	}
	if tb, _ := New(Config{Dim: 1, Rule: stepRule{}}); !tb.keepCount {
		t.Error("an unknown rule must keep update counts")
	}
}

// TestDeleteAtFullLoad fills indexes to their maximum load, where buckets
// overflow into their neighbours (and the last into the first), then
// deletes keys one at a time by backward shift, checking the probing
// invariant and every lookup after each deletion.
func TestDeleteAtFullLoad(t *testing.T) {
	shifts := 0
	for _, nb := range []uint64{1, 2, 3, 8, 61} {
		for seed := range uint64(4) {
			tb, _ := New(Config{Dim: 1, Rule: plainRule{0}})
			tb.setIndex(nb)
			rng := rand.New(rand.NewPCG(seed, nb))
			var keys []uint64
			for tb.Len() < tb.maxLive {
				k := rng.Uint64()
				if err := tb.Pull([]uint64{k}, make([]float32, 1)); err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
			}
			if tb.nBuckets != nb {
				t.Fatalf("index grew to %d buckets", tb.nBuckets)
			}
			checkIndex(t, tb)
			for _, i := range rng.Perm(len(keys)) {
				before := slices.Clone(tb.index)
				r, pos := tb.find(keys[i], hashKey(keys[i]))
				tb.deleteSlot(pos)
				tb.freeRow(r)
				moved := 0
				for j := range before {
					if before[j] != tb.index[j] {
						moved++
					}
				}
				if moved > 2 {
					shifts++
				}
				checkIndex(t, tb)
			}
			if tb.Len() != 0 {
				t.Fatalf("%d rows left", tb.Len())
			}
		}
	}
	if shifts == 0 {
		t.Error("no deletion shifted more than one entry; the test is not reaching overflow chains")
	}
	t.Logf("%d deletions shifted entries across buckets", shifts)
}

// TestWideRows: rows of thousands of floats get smaller pages, and behave
// as narrow ones.
func TestWideRows(t *testing.T) {
	for _, rule := range testRules(t) {
		cfg := Config{Dim: 700, Rule: rule, EvictAfterSteps: 2, Init: RandomUniform{Min: -1, Max: 1, Seed: 5}}
		tb, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if rows := 1 << tb.pageShift; rows*tb.stride > 2*pageFloats || rows < 1<<minPageShift {
			t.Fatalf("%s: pages of %d rows of %d floats", rule.Name(), rows, tb.stride)
		}
		ref := newRef(cfg)
		rng := rand.New(rand.NewPCG(4, 4))
		pool := make([]uint64, 1500)
		for i := range pool {
			pool[i] = rng.Uint64()
		}
		for _, o := range randomOps(rng, pool, cfg.Dim, 150) {
			tb = runOp(t, tb, ref, o)
		}
		checkSame(t, tb, ref)
	}
}

// TestSetRule: a table takes the same rule at another rate (a schedule's)
// and keeps its rows' state; any other rule is refused.
func TestSetRule(t *testing.T) {
	r, _ := optim.New(optim.Config{Name: "adam", LearningRate: 0.1})
	tb, _ := New(Config{Dim: 1, Rule: r})
	if err := tb.Push([]uint64{1}, []float32{1}, 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.SetRule(optim.WithRate(r, 0.01)); err != nil {
		t.Fatal(err)
	}
	if err := tb.Push([]uint64{1}, []float32{1}, 2); err != nil {
		t.Fatal(err)
	}
	// The reference: Adam at 0.1 then at 0.01 on one row.
	p, st := []float32{0}, [][]float32{{0}, {0}}
	r.Update(p, []float32{1}, st, 1)
	optim.WithRate(r, 0.01).Update(p, []float32{1}, st, 2)
	got := make([]float32, 1)
	if err := tb.Pull([]uint64{1}, got); err != nil {
		t.Fatal(err)
	}
	if got[0] != p[0] {
		t.Errorf("after SetRule: row %v, want %v", got[0], p[0])
	}
	other, _ := optim.New(optim.Config{Name: "adagrad", LearningRate: 0.1})
	for _, bad := range []optim.Rule{other, nil} {
		if err := tb.SetRule(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("SetRule(%v) = %v, want ErrConfig", bad, err)
		}
	}
}

// TestGrowingIndexIgnoresFreedRows evicts rows that the old index still
// names while the index grows incrementally, and checks that their keys
// come back as new rows: a freed row's key slot holds the free list's link,
// here equal to the evicted key (keys are row ids), so only the liveness
// check tells the old entry is stale.
func TestGrowingIndexIgnoresFreedRows(t *testing.T) {
	tb, err := New(Config{Dim: 1, Rule: plainRule{0}, KeepTouch: true})
	if err != nil {
		t.Fatal(err)
	}
	g := []float32{1}
	for k := uint64(0); tb.old.slots == nil; k++ {
		if k > 1<<20 {
			t.Fatal("the index never grew incrementally")
		}
		if err := tb.Push([]uint64{k}, g, 1); err != nil {
			t.Fatal(err)
		}
	}
	n := tb.Len()
	x := n - 2 // in the old index and not moved yet, as is x-1
	if x < tb.old.next+1 || x >= tb.old.end {
		t.Fatalf("row %d not among the rows still to move [%d, %d)", x, tb.old.next, tb.old.end)
	}
	var rest []uint64
	for k := range uint64(n) {
		if k != uint64(x) && k != uint64(x-1) {
			rest = append(rest, k)
		}
	}
	if err := tb.Push(rest, make([]float32, len(rest)), 3); err != nil {
		t.Fatal(err)
	}
	if got := tb.EvictBefore(2); got != 2 {
		t.Fatalf("evicted %d rows, want 2", got)
	}
	if tb.old.slots == nil || tb.keyAt(x) != uint64(x) {
		t.Fatalf("setup: growing %v, freed row %d links to %d", tb.old.slots != nil, x, tb.keyAt(x))
	}
	out := []float32{7}
	if err := tb.Pull([]uint64{uint64(x)}, out); err != nil {
		t.Fatal(err)
	}
	if tb.Len() != n-1 || out[0] != 0 {
		t.Fatalf("after evicting 2 of %d rows and pulling one back: Len %d (want %d), value %v (want 0)", n, tb.Len(), n-1, out[0])
	}
	checkIndex(t, tb)
}
