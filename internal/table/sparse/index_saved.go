package sparse

// Saved indexes. A checkpoint written in the table's order (InTableOrder)
// of a table whose rows were never freed holds the table's row i as its
// row i, and a restore into a table that never had a row (ImportAnyOrder)
// makes the file's row i the table's row i again. The table's index is
// then valid for the restored table as it stands: the restore copies it
// instead of hashing every key and building the index again, which is
// most of a restore's CPU (BenchmarkCheckpointFTRL at 3.1M keys: about
// 260 of 310 ms). The copy under a cut's lock (FrozenShared) takes the
// index with the pages, into memory mapped before the lock (FrozenMem):
// 4.4 to 5.6 bytes a row, a memory copy. A restore from a mapped file
// (ImportIndexedInPlace) does not even copy the index and the keys: the
// table keeps them in the file's pages and writes them copy-on-write.

import (
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"unsafe"
)

// SavedIndex is a table's index as a checkpoint stores it beside the rows
// of InTableOrder: its slots (a multiple of 16, one bucket of 16 per cache
// line) and the mask of a slot's row bits (the rest are hash bits). A slot
// is 0 when empty, else tag | (row+1).
type SavedIndex struct {
	Slots   []uint32
	RowMask uint32
}

// ErrIndex is ImportIndexed's error (an ErrSnapshot) for a saved index that
// does not index the snapshot's rows.
var ErrIndex = errors.New("the saved index does not index the rows")

// copyIndex gives the copy c (FrozenShared) a copy of the table's index in
// mem, when the index is whole (no incremental growth under way), no row
// was ever freed (so InTableOrder is row order) and mem has the room:
// c's Sorted views offer it (Sorted.Index). It is one memory copy on the
// caller's core (16 MiB for 3M rows, about 2 ms): under a server's lock,
// handing parts to other goroutines would wait for them to be scheduled,
// which on a loaded machine costs more than the copy.
func (t *Table) copyIndex(c *Table, mem []uint32) {
	if t.live != t.highWater || t.old.slots != nil || len(t.index) == 0 || cap(mem) < len(t.index) {
		return
	}
	mem = mem[:len(t.index)]
	copy(mem, t.index)
	c.saved = &SavedIndex{Slots: mem, RowMask: t.rowMask}
}

// Index returns the index of the view's table when the view is
// InTableOrder's of a FrozenShared copy that took one (the table's rows
// never freed, its index whole), for a checkpoint to store beside the
// rows; ok is false otherwise. The slots must not be changed.
func (v *Sorted) Index() (ix SavedIndex, ok bool) {
	if !v.anyOrder || !v.dense || v.t.saved == nil {
		return SavedIndex{}, false
	}
	return *v.t.saved, true
}

// ImportIndexed is ImportAnyOrder with ix, the index the table whose rows
// s holds (in its order, InTableOrder) had when they were saved
// (Sorted.Index). Into a table that never had a row, with the table's
// settings giving an index of ix's size the same row mask, ix becomes the
// table's index: no key is hashed but a sample's. ix is checked to hold
// every row of s once and nothing else, and a sample of indexSamples rows
// to be found through it (a damaged index is an ErrIndex, and the table is
// put back as it was); that every other row sits where its key's hash
// puts it is taken on trust, as the file's checksum covers it. Anywhere else, or with
// an index of another shape, it is ImportAnyOrder and ix is not used.
func (t *Table) ImportIndexed(s Snapshot, ix SavedIndex) error { return t.importIndexed(s, ix, nil) }

// ImportIndexedInPlace is ImportIndexed that, where it takes ix, makes
// ix.Slots the table's index and the keys of s's whole pages the table's
// keys, in the memory they are in, instead of copying them: for a restore
// from a file mapped private and writable (checkpoint.ReadShardOverlapped),
// the page cache's pages, which the table then writes copy-on-write, and
// neither fresh memory to zero (the larger part of a restore on a virtual
// machine) nor a copy. It calls keep when it does, and then calls the
// function keep returned once neither the table nor any copy of it
// (FrozenShared) holds that memory: after they are garbage. Where it does
// not take ix, or fails, it has not called keep and holds nothing of s.
//
// The caller gives the memory of s.Keys and ix.Slots up: it must not
// change or reuse it. Memory that is a file's mapping must stay readable
// while held (a file truncated under it faults the process).
func (t *Table) ImportIndexedInPlace(s Snapshot, ix SavedIndex, keep func() (release func())) error {
	return t.importIndexed(s, ix, keep)
}

func (t *Table) importIndexed(s Snapshot, ix SavedIndex, keep func() func()) error {
	if err := t.checkImport(s); err != nil {
		return err
	}
	n := len(s.Keys)
	nb := uint64(len(ix.Slots) / bucketSlots)
	if !(t.live == 0 && bulkIndex && t.fillsPages(n)) || len(ix.Slots)%bucketSlots != 0 || nb == 0 || !t.indexFits(nb, ix.RowMask, n) {
		return t.ImportAnyOrder(s)
	}
	before := t.saveState()
	t.stampImport(s)
	inPlace := keep != nil
	if inPlace {
		t.adoptIndex(ix.Slots[:nb*bucketSlots:nb*bucketSlots], nb)
	} else {
		t.setIndex(nb)
	}
	if err := t.fillPagesIndexed(s, ix, inPlace); err != nil {
		t.putState(before)
		return err
	}
	if inPlace {
		t.held = holdMemory(keep())
	}
	return nil
}

// adoptIndex is setIndex with the slots given (of nb buckets) instead of
// new ones.
func (t *Table) adoptIndex(slots []uint32, nb uint64) {
	t.dropOld()
	t.index, t.indexMem = slots, nil
	t.nBuckets = nb
	t.maxLive = min(int(float64(nb*bucketSlots)*maxLoad), t.maxRows)
	t.rowMask = uint32(1)<<bits.Len32(uint32(t.maxLive)) - 1
}

// heldMemory stands for memory a table took from its caller
// (ImportIndexedInPlace): the table and its copies point to it, and once
// none does, the runtime calls the caller's release.
type heldMemory struct{ _ int }

func holdMemory(release func()) *heldMemory {
	h := &heldMemory{}
	runtime.AddCleanup(h, func(release func()) { release() }, release)
	return h
}

// indexFits reports whether an index of nb buckets made by this table
// would have rowMask and room for n rows.
func (t *Table) indexFits(nb uint64, rowMask uint32, n int) bool {
	if nb > (1<<32)/bucketSlots {
		return false
	}
	maxLive := min(int(float64(nb*bucketSlots)*maxLoad), t.maxRows)
	mask := uint32(1)<<bits.Len32(uint32(maxLive)) - 1
	return mask == rowMask && n <= maxLive
}

// fillPagesIndexed is fillPagesAs with the index given: the pages are
// filled, then ix's slots copied into the table's index (set to its size
// by the caller), each core a range, checking that each slot's row is one
// of s's and counting them; the rows seen are marked in a bitmap per core,
// and the index is good if the slots number n and their rows cover all n.
// With inPlace the table's index is ix's slots (adoptIndex), checked where
// they are, and the pages' keys are s's (fillPagesAs).
func (t *Table) fillPagesIndexed(s Snapshot, ix SavedIndex, inPlace bool) error {
	if err := t.fillPagesAs(s, true, true, inPlace); err != nil {
		return err
	}
	n := len(s.Keys)
	mask := t.rowMask
	const part = 1 << 20
	parts := (len(ix.Slots) + part - 1) / part
	workers := max(1, min(t.runner().Width(), parts))
	seen := make([][]uint64, workers)
	var count, bad atomic.Int64
	var next atomic.Int64
	// The slots may be a mapped file that cannot be read (it shrank, or
	// the disk failed): a fault there is an error, as in fillPagesAs.
	var faulted atomic.Value
	t.runner().Run(workers, func(w int) {
		set := make([]uint64, (n+63)/64)
		seen[w] = set
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r != nil {
				if f, ok := r.(interface{ Addr() uintptr }); !ok || !ix.holds(f.Addr()) {
					panic(r) // not the index's memory: a bug
				}
				faulted.CompareAndSwap(nil, fmt.Sprint(r))
				next.Store(int64(parts)) // the others stop too
			}
		}()
		var c int64
		for {
			i := int(next.Add(1) - 1)
			if i >= parts {
				break
			}
			lo := i * part
			hi := min(lo+part, len(ix.Slots))
			dst, src := t.index[lo:hi], ix.Slots[lo:hi]
			if !inPlace {
				copy(dst, src)
			}
			for _, sl := range dst {
				if sl == 0 {
					continue
				}
				r := int(sl&mask) - 1
				if r < 0 || r >= n {
					bad.Store(1)
					return
				}
				set[r>>6] |= 1 << (r & 63)
				c++
			}
		}
		count.Add(c)
	})
	if f := faulted.Load(); f != nil {
		t.pages, t.highWater, t.live = nil, 0, 0
		t.stats.Imported -= int64(n)
		return fmt.Errorf("%w: reading the saved index failed: %v", ErrSnapshot, f)
	}
	covered := 0
	if bad.Load() == 0 && count.Load() == int64(n) {
		for i := range seen[0] {
			var u uint64
			for _, set := range seen {
				u |= set[i]
			}
			covered += bits.OnesCount64(u)
		}
	}
	why := ""
	if covered != n {
		why = fmt.Sprintf("%d slots for %d rows", count.Load(), n)
	} else if r, fault := t.misplacedIn(s, ix); fault != "" {
		t.pages, t.highWater, t.live = nil, 0, 0
		t.stats.Imported -= int64(n)
		return fmt.Errorf("%w: reading the saved rows failed: %v", ErrSnapshot, fault)
	} else if r >= 0 {
		why = fmt.Sprintf("row %d (key %d) is not where its key's hash leads", r, t.keyAt(r))
	}
	if why != "" {
		t.pages, t.highWater, t.live = nil, 0, 0
		t.stats.Imported -= int64(n)
		return fmt.Errorf("%w: %w (%s)", ErrSnapshot, ErrIndex, why)
	}
	return nil
}

// indexSamples is the number of rows whose lookup through a saved index
// ImportIndexed tries: an index that holds every row once but not where
// this program's hash puts them (another program's hash, or a damaged
// placement) fails at the first of them, for about 0.1 ms.
const indexSamples = 1024

// misplaced looks up the keys of up to samples rows spread over the table
// through the index and returns the first row not found, or -1.
func (t *Table) misplaced(samples int) int {
	step := max(1, t.highWater/samples)
	for r := 0; r < t.highWater; r += step {
		k := t.keyAt(r)
		if got, _ := t.findNew(k, hashKey(k)); got != r {
			return r
		}
	}
	return -1
}

// misplacedIn is misplaced, for a table whose keys and index may be s's
// and ix's memory (ImportIndexedInPlace): a fault reading them, which may
// be a mapped file that cannot be read, is returned as fault.
func (t *Table) misplacedIn(s Snapshot, ix SavedIndex) (r int, fault string) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if f, ok := p.(interface{ Addr() uintptr }); !ok || !(ix.holds(f.Addr()) || s.holds(f.Addr())) {
				panic(p) // not their memory: a bug
			}
			r, fault = -1, fmt.Sprint(p)
		}
	}()
	return t.misplaced(indexSamples), ""
}

// holds reports whether addr is in the memory of ix's slots.
func (ix SavedIndex) holds(addr uintptr) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(ix.Slots)))
	return len(ix.Slots) > 0 && addr >= lo && addr-lo < uintptr(len(ix.Slots))*4
}

// Held reports whether the table holds memory it took from a restore
// (ImportIndexedInPlace).
func (t *Table) Held() bool { return t.held != nil }
