package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// twin drives a table all in memory and a tiered one with the same calls.
type twin struct {
	ref, hot *sparse.Table
	tt       *Table
	budget   int // rows the hot tier may hold after a demotion
	flight   *Flight
	rebuild  *Rebuild
}

func newTwin(t *testing.T, cfg sparse.Config, s *Store, budget int) *twin {
	t.Helper()
	ref, err := sparse.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hot, err := sparse.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tt := NewTable(hot, s)
	// The memory bound, with a small margin, so that requests demote on
	// their path too, between the loop's rounds.
	tt.Bound(int64(budget)*tt.RowBytes(), 8*tt.RowBytes())
	return &twin{ref: ref, hot: hot, tt: tt, budget: budget}
}

// settle demotes down to the budget and moves writes along, as the
// background loop does between requests, in a random order.
func (w *twin) settle(t *testing.T, rng *rand.Rand) {
	t.Helper()
	if n := w.hot.Len() - w.budget; n > 0 {
		w.tt.Demote(n)
	}
	switch rng.IntN(3) {
	case 0: // the miss filter's rebuild starts, scans and stays out
		if w.rebuild == nil {
			if w.rebuild = w.tt.StartRebuild(); w.rebuild != nil {
				if err := w.rebuild.Scan(); err != nil {
					t.Fatal(err)
				}
			}
		}
	case 1: // the rebuild ends
		w.tt.EndRebuild(w.rebuild, nil)
		w.rebuild = nil
	}
	switch rng.IntN(3) {
	case 0: // a write starts and stays out across the next calls
		if w.flight == nil {
			w.flight = w.tt.StartFlush()
		}
	case 1: // the write in flight lands
		if w.flight != nil {
			w.tt.EndFlush(w.flight, w.flight.Write())
			w.flight = nil
		}
	}
	if e := w.tt.store.pebble; e != nil && rng.IntN(40) == 0 {
		// The store's memtable to a file: deletions and the rows they
		// delete then meet in compactions (see compact).
		if err := e.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.tt.Err(); err != nil {
		t.Fatal(err)
	}
}

func (w *twin) fetch(t *testing.T, keys []uint64) {
	t.Helper()
	if err := w.tt.Fetch(keys); err != nil {
		t.Fatal(err)
	}
}

// all is every row of the tiered table, both tiers, in key order.
func (w *twin) all(t *testing.T) sparse.Snapshot {
	t.Helper()
	cold, err := w.tt.ColdRows()
	if err != nil {
		t.Fatal(err)
	}
	return Merge(w.hot.Export(), cold)
}

func TestTiersGiveTheSameResults(t *testing.T) { forEachEngine(t, testTiersGiveTheSameResults) }

// forEachEngine runs test once with each store engine as the default.
func forEachEngine(t *testing.T, test func(t *testing.T)) {
	defer func(e string) { defaultEngine = e }(defaultEngine)
	for _, e := range []string{EngineHash, EnginePebble} {
		t.Run(e, func(t *testing.T) {
			defaultEngine = e
			test(t)
		})
	}
}

func testTiersGiveTheSameResults(t *testing.T) {
	// Small miss filters, rebuilt often.
	defer func(n int) { minFilterKeys = n }(minFilterKeys)
	minFilterKeys = 8
	rounds := 300
	if testing.Short() {
		rounds = 120
	}
	s, err := OpenStore(t.TempDir()+"/store", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, name := range optim.Names() {
		rule, err := optim.New(optim.Config{Name: name, LearningRate: 0.05})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			minCount int
			evict    int64
		}{{0, 0}, {2, 0}, {0, 7}, {3, 5}} {
			const keys = 200
			for _, budget := range []int{0, 1, 10, 60, keys} {
				t.Run(fmt.Sprintf("%s/min%d/evict%d/budget%d", name, tc.minCount, tc.evict, budget), func(t *testing.T) {
					seed := uint64(len(name))*1000 + uint64(tc.minCount*100) + uint64(tc.evict) + uint64(budget)
					rng := rand.New(rand.NewPCG(seed, 7))
					cfg := sparse.Config{Dim: 3, Rule: rule, MinCount: tc.minCount, EvictAfterSteps: tc.evict, SketchWidth: 512,
						Init: sparse.RandomNormal{Stddev: 0.1, Seed: 3}}
					w := newTwin(t, cfg, s, budget)
					compareTwin(t, w, rng, rounds, keys)
				})
			}
		}
	}
}

func compareTwin(t *testing.T, w *twin, rng *rand.Rand, rounds, nkeys int) {
	d := w.ref.Dim()
	step := int64(0)
	for range rounds {
		n := 1 + rng.IntN(12)
		ks := make([]uint64, n)
		for i := range ks {
			// skewed: low keys often
			ks[i] = uint64(rng.ExpFloat64()*float64(nkeys)/6) % uint64(nkeys)
		}
		switch op := rng.IntN(10); {
		case op < 4: // pull
			a, b := make([]float32, n*d), make([]float32, n*d)
			if err := w.ref.Pull(ks, a); err != nil {
				t.Fatal(err)
			}
			w.fetch(t, ks)
			if err := w.hot.Pull(ks, b); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(bits(a), bits(b)) {
				t.Fatalf("step %d: pull of %v: all in memory %v, tiered %v", step, ks, a, b)
			}
		case op < 9: // push of distinct keys
			slices.Sort(ks)
			ks = slices.Compact(ks)
			g := make([]float32, len(ks)*d)
			for i := range g {
				g[i] = float32(rng.NormFloat64())
			}
			step += int64(rng.IntN(2))
			if err := w.ref.Push(ks, g, step); err != nil {
				t.Fatal(err)
			}
			w.fetch(t, ks)
			if err := w.hot.Push(ks, g, step); err != nil {
				t.Fatal(err)
			}
		default: // eviction, by steps or by a cutoff (wall clock)
			if rng.IntN(2) == 0 {
				w.ref.Evict(step)
				w.hot.Evict(step)
			} else if w.ref.KeepsTouch() {
				c := step - int64(rng.IntN(10))
				w.ref.EvictBefore(c)
				w.hot.EvictBefore(c)
			}
		}
		w.settle(t, rng)
	}
	want, got := w.ref.Export(), w.all(t)
	if !w.ref.KeepsTouch() {
		got.LastTouch = nil
	}
	if st := w.tt.Stats(); st.Lookups > 0 && st.Filtered == 0 {
		t.Errorf("the miss filter skipped none of %d lookups", st.Lookups)
	}
	if err := sameRows(want, got); err != nil {
		t.Fatalf("after %d rounds (%d rows, %d in memory): %v", rounds, len(want.Keys), w.hot.Len(), err)
	}
	// Compacted, the store holds the same rows: every SingleDelete met
	// the one row it was for.
	if w.flight != nil {
		w.tt.EndFlush(w.flight, w.flight.Write())
		w.flight = nil
	}
	if err := w.tt.Flush(); err != nil {
		t.Fatal(err)
	}
	e := w.tt.store.pebble
	if e == nil {
		return
	}
	lo, hi := bounds(w.tt.prefix)
	if err := e.db.Compact(context.Background(), lo, hi, true); err != nil {
		t.Fatal(err)
	}
	got = w.all(t)
	if !w.ref.KeepsTouch() {
		got.LastTouch = nil
	}
	if err := sameRows(want, got); err != nil {
		t.Fatalf("after a compaction: %v", err)
	}
	if n := e.misuse.Load(); n > 0 {
		t.Fatalf("pebble saw %d SingleDeletes that met no row or more than one", n)
	}
}

func bits(x []float32) []uint32 {
	b := make([]uint32, len(x))
	for i, v := range x {
		b[i] = mathBits(v)
	}
	return b
}

// sameRows compares two snapshots bit for bit.
func sameRows(a, b sparse.Snapshot) error {
	if !slices.Equal(a.Keys, b.Keys) {
		return fmt.Errorf("keys differ: %d rows all in memory, %d tiered\n%v\n%v", len(a.Keys), len(b.Keys), a.Keys, b.Keys)
	}
	if !slices.Equal(bits(a.Values), bits(b.Values)) {
		return fmt.Errorf("values differ")
	}
	for i := range a.State {
		if !slices.Equal(bits(a.State[i]), bits(b.State[i])) {
			return fmt.Errorf("state slot %d differs", i)
		}
	}
	if !slices.Equal(a.Updates, b.Updates) {
		return fmt.Errorf("update counts differ")
	}
	if !slices.Equal(a.LastTouch, b.LastTouch) {
		return fmt.Errorf("last-touched steps differ:\n%v\n%v", a.LastTouch, b.LastTouch)
	}
	return nil
}

// A damaged store file is reported as ErrStore when a row is read from
// it, and the table keeps failing (the ps stops and restores).
func TestDamagedStoreIsReported(t *testing.T) { forEachEngine(t, testDamagedStoreIsReported) }

func testDamagedStoreIsReported(t *testing.T) {
	s, err := OpenStore(t.TempDir()+"/store", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rule, _ := optim.New(optim.Config{Name: "adagrad", LearningRate: 0.1})
	hot, _ := sparse.New(sparse.Config{Dim: 8, Rule: rule})
	tt := NewTable(hot, s)
	keys := make([]uint64, 20000)
	for i := range keys {
		keys[i] = uint64(i)
	}
	if err := hot.Push(keys, make([]float32, 8*len(keys)), 1); err != nil {
		t.Fatal(err)
	}
	tt.Demote(len(keys))
	if err := tt.Flush(); err != nil {
		t.Fatal(err)
	}
	if s.pebble != nil {
		if err := s.pebble.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	files := s.Files()
	if len(files) == 0 {
		t.Fatal("no table file after a flush")
	}
	for _, f := range files {
		fh, err := os.OpenFile(f, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if s.pebble != nil {
			if _, err := fh.WriteAt(bytes.Repeat([]byte{0xA5}, 4096), 1024); err != nil {
				t.Fatal(err)
			}
		} else {
			// A few bytes of every page of the hash file.
			st, _ := fh.Stat()
			for off := int64(100); off < st.Size(); off += 500 {
				if _, err := fh.WriteAt([]byte{0xA5, 0x5A}, off); err != nil {
					t.Fatal(err)
				}
			}
		}
		fh.Close()
	}
	err = tt.Fetch(keys[:100])
	if !errors.Is(err, ErrStore) {
		t.Fatalf("Fetch from a damaged store: %v, want ErrStore", err)
	}
	if !errors.Is(tt.Fetch(keys[5000:5001]), ErrStore) || tt.Err() == nil {
		t.Fatal("the table went on after a store error")
	}
	// Told from a failed disk: the ps restores the shard.
	m := &Manager{cfg: Config{Dir: s.dir}}
	d, ok := m.Damaged(err)
	if !ok || strings.Contains(d.Error(), "carrier") || !strings.Contains(d.Error(), s.dir) {
		t.Fatalf("Damaged(%q) = %q, %v; want a damaged store, its message naming %s", err, d, ok, s.dir)
	}
	if _, ok := m.Damaged(fmt.Errorf("%w: writing to %s: no space left on device", ErrStore, s.dir)); ok {
		t.Fatal("a full disk taken for a damaged store")
	}
}
