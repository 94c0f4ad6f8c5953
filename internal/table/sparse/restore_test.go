package sparse

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/paramserv/paramserv/internal/optim"
)

// restoreSnapshot is a snapshot of n rows of dim, with slots state slots,
// counts and touch steps, whose keys come from key(i) (ascending).
func restoreSnapshot(n, dim, slots int, key func(i int) uint64) Snapshot {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(dim)))
	s := Snapshot{Dim: dim, Keys: make([]uint64, n), Values: make([]float32, n*dim),
		State: make([][]float32, slots), Updates: make([]uint32, n), LastTouch: make([]int64, n)}
	for i := range s.Keys {
		s.Keys[i] = key(i)
		s.Updates[i], s.LastTouch[i] = uint32(rng.IntN(50)), int64(100+rng.IntN(50))
	}
	for j := range s.State {
		s.State[j] = make([]float32, n*dim)
	}
	for _, col := range append([][]float32{s.Values}, s.State...) {
		for i := range col {
			col[i] = rng.Float32()
		}
	}
	return s
}

// importBoth imports s into a new table of cfg as a restore does (pages
// filled on every core, the index built in ranges of buckets, on at least
// two cores) and key by key, and returns both tables and their errors.
func importBoth(t *testing.T, cfg Config, s Snapshot) (got, want *Table, gotErr, wantErr error) {
	t.Helper()
	defer func(bulk bool, par, procs int) {
		bulkIndex, parallelIndex = bulk, par
		runtime.GOMAXPROCS(procs)
	}(bulkIndex, parallelIndex, runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	parallelIndex = 0 // several ranges of buckets however few the rows
	for _, bulk := range []bool{true, false} {
		bulkIndex = bulk
		tb, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if bulk {
			if !tb.fillsPages(len(s.Keys)) {
				t.Fatalf("%d rows do not take the restore's path", len(s.Keys))
			}
			got, gotErr = tb, tb.Import(s)
		} else {
			want, wantErr = tb, tb.Import(s)
		}
	}
	return got, want, gotErr, wantErr
}

// A restore's Import (fillPages) builds the table Import builds key by key:
// the same rows, state, counts, touch steps and stats, an index that holds
// every row (checkIndex), and the same table after pushes. Two thirds of
// the skewed keys have their home in the first half of the buckets (of two
// ranges): the scatter's room for each range overflows (spills), and
// entries run past the end of their range of buckets into the next
// (indexParts' overflow).
func TestFillPagesMatchesImport(t *testing.T) {
	type config struct {
		rule string
		dim  int
	}
	configs := []config{{"ftrl", 1}, {"ftrl", 8}, {"adagrad", 1}}
	if !testing.Short() {
		configs = append(configs, config{"adam", 3}, config{"adam", 1}, config{"ftrl", 3}, config{"adam", 8}, config{"momentum", 4}, config{"sgd", 2})
	}
	for _, cf := range configs {
		rule, dim := cf.rule, cf.dim
		{
			r, err := optim.New(optim.Config{Name: rule, LearningRate: 0.1})
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Dim: dim, Rule: r, EvictAfterSteps: 1000}
			probe, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			pageRows := 1 << probe.pageShift
			rng := rand.New(rand.NewPCG(9, uint64(dim)))
			spread := func(i int) uint64 { return uint64(i)<<24 | rng.Uint64N(1<<24) }
			var skewed []uint64
			for k := uint64(0); len(skewed) < 2*pageRows+100; k++ {
				if hashKey(k)>>63 == 0 || k%2 == 0 {
					skewed = append(skewed, k)
				}
			}
			cases := []struct {
				name string
				n    int
				key  func(int) uint64
			}{
				{"two pages", 2 * pageRows, spread},
				{"two pages and a row", 2*pageRows + 1, spread},
				{"five pages and a part", 5*pageRows + 777, spread},
				{"skewed", len(skewed), func(i int) uint64 { return skewed[i] }},
			}
			if rule == "ftrl" && dim == 1 {
				cases = append(cases, struct {
					name string
					n    int
					key  func(int) uint64
				}{"key 0 first", 2 * pageRows, func(i int) uint64 { return uint64(i) * 3 }})
			}
			for ci, c := range cases {
				if testing.Short() && c.name != "key 0 first" && ((ci+dim+len(rule))%2 == 1 || dim == 8 && ci > 0) {
					continue // about half of the cases, each config another half
				}
				t.Run(fmt.Sprintf("%s/dim=%d/%s", rule, dim, c.name), func(t *testing.T) {
					s := restoreSnapshot(c.n, dim, probe.slots, c.key)
					if !probe.keepCount {
						s.Updates = nil // the rule keeps none
					}
					got, want, gotErr, wantErr := importBoth(t, cfg, s)
					if gotErr != nil || wantErr != nil {
						t.Fatalf("import: %v; key by key: %v", gotErr, wantErr)
					}
					if got.highWater != c.n || len(got.pages) != (c.n+pageRows-1)/pageRows {
						t.Fatalf("high water %d, %d pages: the pages were not filled whole", got.highWater, len(got.pages))
					}
					checkIndex(t, got)
					gs, ws := got.Stats(), want.Stats()
					gs.Bytes, ws.Bytes = 0, 0
					if gs != ws || got.base != want.base || got.clock != want.clock {
						t.Fatalf("stats %+v base %d clock %d, key by key %+v %d %d", gs, got.base, got.clock, ws, want.base, want.clock)
					}
					if !reflect.DeepEqual(got.Export(), s) || !reflect.DeepEqual(want.Export(), s) {
						t.Fatal("the restored table exports other rows than it imported")
					}
					push := append(slices.Clone(s.Keys[:40]), s.Keys[c.n-40:]...)
					push = append(push, 1<<62+7, 1<<63+7) // new rows after the imported ones
					grads := make([]float32, len(push)*dim)
					for i := range grads {
						grads[i] = rng.Float32() - 0.5
					}
					for _, tb := range []*Table{got, want} {
						if err := tb.Push(push, grads, 160); err != nil {
							t.Fatal(err)
						}
						tb.Evict(1120)
					}
					if !reflect.DeepEqual(got.Export(), want.Export()) {
						t.Fatal("after a push and an eviction the restored table differs from one built key by key")
					}
					checkIndex(t, got)
				})
			}
		}
	}
}

// Keys out of order are found as a restore's Import copies them: the error
// is Unordered's (the first place, whichever core copies it), and the
// table is left as it was, with no rows, ready for another Import.
func TestFillPagesFindsKeysOutOfOrder(t *testing.T) {
	r, err := optim.New(optim.Config{Name: "ftrl", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dim: 1, Rule: r, EvictAfterSteps: 1000}
	probe, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pageRows := 1 << probe.pageShift
	n := 5*pageRows + 5
	good := restoreSnapshot(n, 1, 2, func(i int) uint64 { return uint64(i+1) * 10 })
	good.Updates = nil // FTRL keeps no counts
	for bi, bad := range [][]int{{1}, {pageRows}, {pageRows + 1}, {3*pageRows - 1}, {n - 1}, {4 * pageRows, pageRows + 17}, {2 * pageRows, 4 * pageRows}} {
		for _, equal := range []bool{false, true} {
			if testing.Short() && (equal != (bi%2 == 1) || bi == 2 || bi == 3 || bi == 6) {
				continue // one of the two for each of four places
			}
			t.Run(fmt.Sprintf("at=%v/equal=%v", bad, equal), func(t *testing.T) {
				s := good
				s.Keys = slices.Clone(good.Keys)
				for _, i := range bad {
					s.Keys[i] = s.Keys[i-1] - 1
					if equal {
						s.Keys[i] = s.Keys[i-1]
					}
				}
				got, _, gotErr, wantErr := importBoth(t, cfg, s)
				if i := Unordered(s.Keys, defaultRunner); i != min(bad[0], bad[len(bad)-1]) {
					t.Fatalf("Unordered = %d, want %d: the case is wrong", i, min(bad[0], bad[len(bad)-1]))
				}
				if !errors.Is(gotErr, ErrSnapshot) || !errors.Is(gotErr, ErrUnordered) || wantErr == nil || gotErr.Error() != wantErr.Error() {
					t.Fatalf("import: %v; key by key: %v; want the same ErrSnapshot and ErrUnordered", gotErr, wantErr)
				}
				fresh, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				assertUntouched(t, got, fresh)
				if err := got.Import(good); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got.Export(), good) {
					t.Fatal("after a refused import, an import of good rows exports other rows")
				}
				checkIndex(t, got)
			})
		}
	}
}

// assertUntouched fails unless tb, after an Import that failed, is as
// fresh (a new table of the same config) is.
func assertUntouched(t *testing.T, tb, fresh *Table) {
	t.Helper()
	type view struct {
		Live, HighWater, Pages int
		Base, Clock            int64
		Mod, Floor, NBuckets   uint64
		Index, MaxLive         int
		RowMask                uint32
		Stats                  Stats
	}
	v := func(t *Table) view {
		return view{t.live, t.highWater, len(t.pages), t.base, t.clock, t.mod, t.floor, t.nBuckets, len(t.index), t.maxLive, t.rowMask, t.Stats()}
	}
	if got, want := v(tb), v(fresh); got != want {
		t.Fatalf("a failed import left the table changed: %+v, a new table %+v", got, want)
	}
}

// A restore's Import reads a mapped file on goroutines of its own: where
// the file cannot be read (here it shrank), the fault is ErrSnapshot, and
// the table is left as it was, whether the keys or the values fault.
func TestFillPagesFaultIsAnError(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("mapping is tested on linux")
	}
	r, err := optim.New(optim.Config{Name: "ftrl", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dim: 1, Rule: r}
	probe, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := 6 << probe.pageShift
	good := restoreSnapshot(n, 1, 2, func(i int) uint64 { return uint64(i) })
	for _, col := range []string{"keys", "values"} {
		t.Run(col, func(t *testing.T) {
			size := n * 8
			b := mapShrunk(t, size, size/3, func(b []byte) {
				if col == "keys" {
					copy(unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n), good.Keys)
				}
			})
			s := good
			if col == "keys" {
				s.Keys = unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n)
			} else {
				s.Values = unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
			}
			tb, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = tb.Import(s)
			if !errors.Is(err, ErrSnapshot) {
				t.Fatalf("import of a snapshot whose %s fault: %v, want ErrSnapshot", col, err)
			}
			fresh, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			assertUntouched(t, tb, fresh)
		})
	}
}

// mapShrunk maps a file of size bytes, written by fill, then cuts the file
// to keep bytes: reading the mapping past keep faults (SIGBUS).
func mapShrunk(t *testing.T, size, keep int, fill func([]byte)) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rows")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	fill(b)
	if err := f.Truncate(int64(keep)); err != nil {
		t.Fatal(err)
	}
	return b
}

// ImportAnyOrder of rows in no order (a checkpoint written in table
// order) into a new table fills its pages as they come: row i of the
// snapshot is row i of the table, the index holds every row, and the table
// holds what Import of the same rows sorted holds. A key that repeats, in
// one page, across pages, or among the skewed keys whose index entries run
// into the next range of buckets, is found (ErrDuplicate) and the table is
// left with no rows, ready for another import.
func TestImportAnyOrder(t *testing.T) {
	defer func(par, procs int) {
		parallelIndex = par
		runtime.GOMAXPROCS(procs)
	}(parallelIndex, runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	parallelIndex = 0 // several ranges of buckets however few the rows
	r, err := optim.New(optim.Config{Name: "adam", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dim: 2, Rule: r, EvictAfterSteps: 1000}
	probe, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pageRows := 1 << probe.pageShift
	var skewed []uint64
	for k := uint64(0); len(skewed) < 3*pageRows+100; k++ {
		if hashKey(k)>>63 == 0 || k%2 == 0 {
			skewed = append(skewed, k)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	rng.Shuffle(len(skewed), func(i, j int) { skewed[i], skewed[j] = skewed[j], skewed[i] })
	s := restoreSnapshot(len(skewed), 2, probe.slots, func(i int) uint64 { return skewed[i] })
	n := len(s.Keys)

	tb, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.ImportAnyOrder(s); err != nil {
		t.Fatal(err)
	}
	if tb.highWater != n || !slices.Equal(tb.pages[0].keys[:10], s.Keys[:10]) {
		t.Fatal("the rows were not filled in the snapshot's order")
	}
	checkIndex(t, tb)
	want, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := want.Import(s.sorted()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tb.Export(), want.Export()) {
		t.Fatal("the table differs from Import of the sorted rows")
	}
	// In the table's order again, as the next checkpoint streams it.
	if got := tb.InTableOrder().Snapshot(); !reflect.DeepEqual(got, s) {
		t.Fatal("InTableOrder's snapshot is not the rows in the order imported")
	}

	for _, at := range [][2]int{{0, 1}, {5, pageRows + 3}, {n - 1, 2}, {pageRows, 3 * pageRows}} {
		t.Run(fmt.Sprintf("dup=%v", at), func(t *testing.T) {
			bad := s
			bad.Keys = slices.Clone(s.Keys)
			bad.Keys[at[1]] = bad.Keys[at[0]]
			tb, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = tb.ImportAnyOrder(bad)
			if !errors.Is(err, ErrDuplicate) || !errors.Is(err, ErrSnapshot) {
				t.Fatalf("import of key %d at rows %v: %v, want ErrDuplicate", bad.Keys[at[0]], at, err)
			}
			if tb.Len() != 0 || tb.highWater != 0 {
				t.Fatalf("after the error the table holds %d rows", tb.Len())
			}
			if err := tb.ImportAnyOrder(s); err != nil {
				t.Fatal(err)
			}
			checkIndex(t, tb)
		})
	}
	// Into a table with rows, and a few rows: sorted, then Import.
	small := restoreSnapshot(10, 2, probe.slots, func(i int) uint64 { return uint64(100 - i) })
	tb2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb2.ImportAnyOrder(small); err != nil {
		t.Fatal(err)
	}
	if got := tb2.Export().Keys; !slices.IsSorted(got) || len(got) != 10 {
		t.Fatalf("keys %v", got)
	}
	small.Keys[3] = small.Keys[7]
	if err := tb2.ImportAnyOrder(small); !errors.Is(err, ErrUnordered) {
		t.Fatalf("a repeated key among a few rows: %v", err)
	}
}
