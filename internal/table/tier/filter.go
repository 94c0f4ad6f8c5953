package tier

import (
	"fmt"
	mbits "math/bits"
)

// The miss filter. Most keys a push brings that are not in memory are not
// on disk either (new keys, or keys evicted long ago), and asking pebble
// costs a seek through every level whose key range covers the key. A Table
// keeps a Bloom filter of the keys it has put in the disk tier: a key the
// filter has never seen is not looked for. A key taken back into memory
// stays in the filter (a Bloom filter cannot forget), so the filter is
// rebuilt from the store once it has taken more keys than it was sized for:
// see StartRebuild.

// filterBitsPerKey gives a false-positive rate of about 1% at the sized
// number of keys (7 probes).
const (
	filterBitsPerKey = 10
	filterProbes     = 7
)

// minFilterKeys is the fewest keys a filter is sized for (a variable so
// that a test can force rebuilds): 5 KiB. A ps has a filter per table
// (deep_ctr has 26), and a filter that outgrows its size is rebuilt larger.
var minFilterKeys = 1 << 12

// missFilter is a Bloom filter of uint64 keys.
type missFilter struct {
	words []uint64
	nbits uint64 // 64 * len(words): a bit is chosen by pos, not a mask, so any size will do
	keys  int    // the keys it is sized for
	adds  int    // keys added (with repeats)
}

// newMissFilter is a filter sized for n keys.
func newMissFilter(n int) *missFilter {
	n = max(n, minFilterKeys)
	words := (n*filterBitsPerKey + 63) / 64
	return &missFilter{words: make([]uint64, words), nbits: 64 * uint64(words), keys: n}
}

// pos is the bit a probe's hash h chooses: h scaled to [0, nbits) (the
// high word of h·nbits), so the filter need not be a power of two bits,
// which cost up to twice the memory.
func (b *missFilter) pos(h uint64) uint64 {
	hi, _ := mbits.Mul64(h, b.nbits)
	return hi
}

// hashes are two independent hashes of k (splitmix64's finaliser, twice).
func hashes(k uint64) (uint64, uint64) {
	mixer := func(x uint64) uint64 {
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		return x ^ x>>31
	}
	h := mixer(k + 0x9e3779b97f4a7c15)
	return h, mixer(h) | 1
}

func (b *missFilter) add(k uint64) {
	h1, h2 := hashes(k)
	for range filterProbes {
		p := b.pos(h1)
		b.words[p>>6] |= 1 << (p & 63)
		h1 += h2
	}
	b.adds++
}

// has reports whether k may have been added: false means it never was.
func (b *missFilter) has(k uint64) bool {
	h1, h2 := hashes(k)
	for range filterProbes {
		if p := b.pos(h1); b.words[p>>6]&(1<<(p&63)) == 0 {
			return false
		}
		h1 += h2
	}
	return true
}

// full reports whether the filter has taken more keys than it was sized
// for: its false positives grow past the rate it was made for.
func (b *missFilter) full() bool { return b.adds > b.keys }

// bytes is the filter's memory.
func (b *missFilter) bytes() int64 { return int64(8 * len(b.words)) }

// Rebuild makes a new miss filter for a table from a snapshot of the store
// and the changes not yet written at StartRebuild, and the keys demoted
// while the scan is out. Scan runs with no lock held; the rest under the
// owner's lock.
type Rebuild struct {
	t     *Table
	view  rowView
	err   error // the view could not be taken
	next  *missFilter
	later []uint64 // keys demoted since StartRebuild
}

// StartRebuild starts a rebuild of the miss filter if it has taken more
// keys than it was sized for and none is out: nil otherwise. Call Scan on
// the result with no lock held, then EndRebuild under the lock.
func (t *Table) StartRebuild() *Rebuild {
	if !t.filter.full() || t.rebuild != nil || t.err != nil {
		return nil
	}
	// Sized for half again the rows on disk, so that a table whose disk
	// tier holds steady rebuilds after a third of them have moved.
	rb := &Rebuild{t: t, next: newMissFilter(int(t.onDisk) * 3 / 2)}
	rb.view, rb.err = t.rows.view()
	for _, layer := range []map[uint64]*entry{t.flight, t.pend} {
		for k, e := range layer {
			if e.row != nil {
				rb.next.add(k)
			}
		}
	}
	t.rebuild = rb
	return rb
}

// Scan adds every key of the table in the store's snapshot to the new
// filter. It touches only the rebuild, which no one else changes while it
// is out.
func (rb *Rebuild) Scan() error {
	if rb.err != nil {
		return rb.err
	}
	return rb.view.scan(func(k uint64, _ []byte) { rb.next.add(k) })
}

// EndRebuild ends the rebuild rb, whose Scan returned err: the table's
// filter is now the new one, or, on an error, the table fails (Err).
func (t *Table) EndRebuild(rb *Rebuild, err error) {
	if rb == nil {
		return
	}
	if rb.view != nil {
		rb.view.release()
	}
	if t.rebuild != rb {
		return
	}
	t.rebuild = nil
	if err != nil {
		if t.err == nil {
			t.err = fmt.Errorf("%w: reading the keys of %s: %w", ErrStore, t.store.dir, err)
		}
		return
	}
	for _, k := range rb.later {
		rb.next.add(k)
	}
	rb.next.adds = int(t.onDisk) // about the keys in it now
	t.filter = rb.next
	t.stats.Rebuilds++
}
