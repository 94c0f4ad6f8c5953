package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// hashRow is the row the hash-file tests write for key k at version v.
func hashRow(n int, k uint64, v int) []byte {
	r := make([]byte, n)
	binary.LittleEndian.PutUint64(r, k)
	binary.LittleEndian.PutUint64(r[8:], uint64(v))
	return r
}

// contents reads every row of a view (scan) and checks get agrees.
func viewContents(t *testing.T, v rowView) map[uint64]string {
	t.Helper()
	got := map[uint64]string{}
	if err := v.scan(func(k uint64, row []byte) {
		if _, ok := got[k]; ok {
			t.Errorf("key %d twice in a scan", k)
		}
		got[k] = string(row)
	}); err != nil {
		t.Fatal(err)
	}
	keys := slices.Sorted(maps.Keys(got))
	n := 0
	if err := v.get(keys, func(i int, row []byte) {
		n++
		if string(row) != got[keys[i]] {
			t.Errorf("key %d: get and scan differ", keys[i])
		}
	}); err != nil {
		t.Fatal(err)
	}
	if n != len(keys) {
		t.Errorf("get found %d of the %d keys a scan gave", n, len(keys))
	}
	return got
}

// The hash file against a map: random batches of writes and deletions
// (pages split, the directory doubles), reads of present and absent keys,
// and views taken between batches that keep seeing the rows of their time
// while the writes go on (copy on write), then released.
func TestHashFileRoundTrip(t *testing.T) {
	// Spans of pages written and read: none (each page alone), the
	// default, and the whole file.
	for _, gap := range [][2]int{{0, 0}, {spanGap, readGap}, {spanMax, spanMax}} {
		t.Run(fmt.Sprintf("gap%d", gap[0]), func(t *testing.T) {
			defer func(w, r int) { spanGap, readGap = w, r }(spanGap, readGap)
			spanGap, readGap = gap[0], gap[1]
			testHashFileRoundTrip(t)
		})
	}
}

func testHashFileRoundTrip(t *testing.T) {
	for _, rowLen := range []int{76, 3000} { // 48 slots a page; 16 slots of a larger page
		t.Run(fmt.Sprint(rowLen), func(t *testing.T) {
			e := &hashEngine{dir: "s", fs: vfs.NewMem()}
			if err := e.fs.MkdirAll("s", 0o755); err != nil {
				t.Fatal(err)
			}
			h, err := e.open(1, rowLen)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, uint64(rowLen)))
			want := map[uint64]string{}
			type held struct {
				v    rowView
				want map[uint64]string
			}
			var views []held
			for round := range 60 {
				// A batch of changes, ascending by key, each key once.
				keys := map[uint64]bool{}
				for range 1 + rng.IntN(400) {
					keys[uint64(rng.IntN(3000))*0x9E3779B97F4A7C15] = true
				}
				var ch []change
				for _, k := range slices.Sorted(maps.Keys(keys)) {
					if _, ok := want[k]; ok && rng.IntN(3) == 0 {
						ch = append(ch, change{key: k})
						delete(want, k)
						continue
					}
					r := hashRow(rowLen, k, round)
					_, held := want[k]
					ch = append(ch, change{key: k, row: r, over: held})
					want[k] = string(r)
				}
				if err := h.write(ch); err != nil {
					t.Fatal(err)
				}
				probe := slices.Collect(maps.Keys(keys))
				probe = append(probe, 7, 8, 9) // never written
				slices.Sort(probe)
				found := 0
				if err := h.get(probe, func(i int, row []byte) {
					found++
					if string(row) != want[probe[i]] {
						t.Fatalf("round %d: key %d: wrong row", round, probe[i])
					}
				}); err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, k := range probe {
					if _, ok := want[k]; ok {
						n++
					}
				}
				if found != n {
					t.Fatalf("round %d: found %d of %d rows", round, found, n)
				}
				if rng.IntN(6) == 0 {
					v, err := h.view()
					if err != nil {
						t.Fatal(err)
					}
					views = append(views, held{v, maps.Clone(want)})
				}
				if len(views) > 0 && rng.IntN(8) == 0 {
					i := rng.IntN(len(views))
					if got := viewContents(t, views[i].v); !maps.Equal(got, views[i].want) {
						t.Fatalf("round %d: a view holds %d rows, want the %d of its time", round, len(got), len(views[i].want))
					}
					views[i].v.release()
					views = slices.Delete(views, i, i+1)
				}
			}
			for _, v := range views {
				if got := viewContents(t, v.v); !maps.Equal(got, v.want) {
					t.Fatalf("a view holds %d rows, want the %d of its time", len(got), len(v.want))
				}
				v.v.release()
			}
			v, _ := h.view()
			if got := viewContents(t, v); !maps.Equal(got, want) {
				t.Fatalf("the file holds %d rows, want %d", len(got), len(want))
			}
			v.release()
			if h.depth == 0 {
				t.Fatal("no page split")
			}
			// Only the table's file is left, and dropping it removes it.
			if got, want := e.bytes.Load(), int64(h.pages)*int64(h.page); got != want {
				t.Fatalf("%d bytes on disk after the views' release, want %d", got, want)
			}
			if err := h.drop(); err != nil {
				t.Fatal(err)
			}
			if left, _ := e.fs.List("s"); len(left) > 0 || e.bytes.Load() != 0 {
				t.Fatalf("files left after drop: %v, %d bytes", left, e.bytes.Load())
			}
		})
	}
}

// A damaged page fails the read that meets it, in the file and in a view.
func TestHashFileDamage(t *testing.T) {
	e := &hashEngine{dir: "s", fs: vfs.NewMem()}
	_ = e.fs.MkdirAll("s", 0o755)
	h, err := e.open(1, 76)
	if err != nil {
		t.Fatal(err)
	}
	var ch []change
	for k := range uint64(1000) {
		ch = append(ch, change{key: k, row: hashRow(76, k, 0)})
	}
	if err := h.write(ch); err != nil {
		t.Fatal(err)
	}
	v, _ := h.view()
	defer v.release()
	// One byte of every row of the page that holds key 5.
	id := h.dir[top(hashKey(5), h.depth)]
	for s := range h.slots {
		if _, err := h.f.WriteAt([]byte{0xFF}, int64(id)*int64(h.page)+int64(s*h.slot)+20); err != nil {
			t.Fatal(err)
		}
	}
	// Each error names the file once (a write's error, below, too).
	named := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errDamaged) {
			t.Fatalf("%s: %v, want errDamaged", what, err)
		}
		if n := strings.Count(err.Error(), h.name); n != 1 {
			t.Errorf("%s: %q names %s %d times, want once", what, err, h.name, n)
		}
	}
	named("get from a damaged page", h.get([]uint64{5}, func(int, []byte) {}))
	named("scan over a damaged page", v.scan(func(uint64, []byte) {}))
	if err := h.get([]uint64{999}, func(int, []byte) {}); err != nil && id != h.dir[top(hashKey(999), h.depth)] {
		t.Fatalf("get from a sound page: %v", err)
	}
	// A write (the last: it fails the engine) of a row into the damaged page reads it first.
	var over []change
	for k := uint64(1000); len(over) < 2*h.slots; k++ {
		if h.dir[top(hashKey(k), h.depth)] == id {
			over = append(over, change{key: k, row: hashRow(76, k, 1)})
		}
	}
	named("write into a damaged page", h.write(over))
}

// A write that fails (a full disk) is the engine's error from then on:
// the file may be half written, so no later read or write is trusted.
func TestHashFileFullDisk(t *testing.T) {
	full := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return fmt.Errorf("write %s: %w", op.Path, syscall.ENOSPC)
		}
		return nil
	})}
	fs := errorfs.Wrap(vfs.NewMem(), full)
	e := &hashEngine{dir: "s", fs: fs}
	_ = fs.MkdirAll("s", 0o755)
	h, err := e.open(1, 76)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.write([]change{{key: 1, row: hashRow(76, 1, 0)}}); err != nil {
		t.Fatal(err)
	}
	full.On()
	err = h.write([]change{{key: 2, row: hashRow(76, 2, 0)}})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write to a full disk: %v, want ENOSPC", err)
	}
	full.Off()
	if !errors.Is(e.Err(), syscall.ENOSPC) {
		t.Fatalf("the engine's error after a failed write: %v", e.Err())
	}
	if err := h.get([]uint64{1}, func(int, []byte) {}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("get after a failed write: %v, want its error", err)
	}
}

// A restore's rows go into an empty file in one pass (load), pages
// overflowing the sized directory split, and every row reads back; into a
// file that holds rows already, load is a write.
func TestHashFileLoad(t *testing.T) {
	defer func(f float64) { reserveFill = f }(reserveFill)
	reserveFill = 2 // pages for half the rows: most split
	e := &hashEngine{dir: "s", fs: vfs.NewMem()}
	_ = e.fs.MkdirAll("s", 0o755)
	h, err := e.open(1, 76)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	key := func(j int) uint64 { return uint64(j) * 0x9E3779B97F4A7C15 }
	row := func(j int, dst []byte) { copy(dst[:76], hashRow(76, key(j), j)) }
	if err := h.load(n, key, row); err != nil {
		t.Fatal(err)
	}
	if h.pages <= 1<<h.local[0] {
		t.Fatalf("no page split in the load (%d pages)", h.pages)
	}
	check := func(n int) {
		t.Helper()
		v, _ := h.view()
		defer v.release()
		got := viewContents(t, v)
		if len(got) != n {
			t.Fatalf("%d rows after the load, want %d", len(got), n)
		}
		for j := range n {
			if got[key(j)] != string(hashRow(76, key(j), j)) {
				t.Fatalf("row %d differs", j)
			}
		}
	}
	check(n)
	more := func(j int) uint64 { return key(n + j) }
	if err := h.load(100, more, func(j int, dst []byte) { copy(dst[:76], hashRow(76, more(j), n+j)) }); err != nil {
		t.Fatal(err)
	}
	check(n + 100)
}

// A file reserved for a restore's rows takes them a bucket of pages at a
// time (loadSpill): each bucket's rows in one pass, pages overflowing
// split (the directory doubles past the pages of the buckets to come),
// and every row reads back.
func TestHashFileLoadInBuckets(t *testing.T) {
	defer func(f float64) { reserveFill = f }(reserveFill)
	reserveFill = 2 // pages for half the rows: most split
	e := &hashEngine{dir: "s", fs: vfs.NewMem()}
	_ = e.fs.MkdirAll("s", 0o755)
	h, err := e.open(1, 76)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	key := func(j int) uint64 { return uint64(j) * 0x9E3779B97F4A7C15 }
	h.reserve(n)
	depth := h.depth
	for b := range uint64(8) {
		var keys []int
		for j := range n {
			if top(hashKey(key(j)), 3) == b {
				keys = append(keys, j)
			}
		}
		if err := h.load(len(keys), func(i int) uint64 { return key(keys[i]) }, func(i int, dst []byte) { copy(dst[:76], hashRow(76, key(keys[i]), keys[i])) }); err != nil {
			t.Fatal(err)
		}
	}
	if h.depth == depth {
		t.Fatalf("the directory never doubled (depth %d)", depth)
	}
	v, _ := h.view()
	defer v.release()
	got := viewContents(t, v)
	if len(got) != n {
		t.Fatalf("%d rows after the load, want %d", len(got), n)
	}
	for j := range n {
		if got[key(j)] != string(hashRow(76, key(j), j)) {
			t.Fatalf("row %d differs", j)
		}
	}
}
