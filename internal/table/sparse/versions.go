package sparse

import (
	"fmt"
	"math"
)

// Row versions, for incremental pulls (a worker that keeps the rows it
// pulled asks only for those changed since). They are a different thing
// from the dirty bits of changes.go, which a checkpoint clears: versions
// are never cleared, and any number of readers compare them with the
// version they hold.
//
// Once EnableVersions is called, the table keeps a counter, Version, that
// every call which may change a value moves forward (Push, PushSet, Evict,
// Import), and stamps each row with the counter when its value or its
// existence changes. A key's value is unchanged since version v when
//
//   - it has a row whose stamp is at most v, and no Import came after v; or
//   - it has no row, and no row was freed (Evict) and no Import came after
//     v (a key with no row reads as its initial value, a pure function of
//     the key; a row created by Pull or Push holds that same value until
//     updated, so it is stamped with the version of the last freeing).
//
// Only the value counts: an update that changes a row's optimizer state
// but leaves its value bit for bit as it was (FTRL keeps a weight at 0
// while |z| is under its L1 strength) does not stamp it.
//
// ChangedSince answers that question for the keys of a KeySet. The cost is
// 8 bytes per row, allocated only once versions are enabled.

// EnableVersions turns row versions on (idempotent). Rows that exist now are
// stamped 0: older than any version a reader can hold, since readers get
// versions only from Version after this call.
func (t *Table) EnableVersions() {
	if t.versions {
		return
	}
	t.versions = true
	t.mod++
	for i := range t.pages {
		t.pages[i].ver = make([]uint64, len(t.pages[i].keys))
	}
}

// VersionsEnabled reports whether EnableVersions was called.
func (t *Table) VersionsEnabled() bool { return t.versions }

// Version is the table's version now: a reader that read every value now
// holds the values of this version.
func (t *Table) Version() uint64 { return t.mod }

// bump starts a call that may change values.
func (t *Table) bump() {
	if t.versions {
		t.mod++
	}
}

// stamp records that rows lo..hi of p changed at the current version.
func (t *Table) stamp(p *page, lo, hi int) {
	if p.ver != nil {
		setAll(p.ver[lo:hi], t.mod)
	}
}

// sameBits reports whether a and b hold the same float32 bits.
func sameBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// ChangedSince sets, in sel (a bitmap of ks.Len() bits, cleared first), the
// keys of ks whose value may have changed since version since, and those
// marked in lack (a bitmap of the same size, or nil for none); it returns
// how many it set. ks must have been read by PullSet on t just before, with
// no call on t in between (its rows are those PullSet resolved).
func (t *Table) ChangedSince(ks *KeySet, since uint64, lack, sel []uint64) (int, error) {
	words := (len(ks.keys) + 63) / 64
	switch {
	case !t.versions:
		return 0, fmt.Errorf("sparse: ChangedSince without EnableVersions")
	case len(sel) != words || (lack != nil && len(lack) != words):
		return 0, fmt.Errorf("%w: bitmaps of %d and %d words for %d keys, want %d", ErrShape, len(sel), len(lack), len(ks.keys), words)
	case ks.table != t || ks.gen != t.gen || len(ks.rows) != len(ks.keys):
		return 0, fmt.Errorf("sparse: ChangedSince of a KeySet not just read from this table")
	}
	if lack != nil {
		copy(sel, lack)
	} else {
		clear(sel)
	}
	if t.floor > since {
		setAll(sel, ^uint64(0))
		if r := len(ks.keys) & 63; r != 0 {
			sel[words-1] = 1<<r - 1
		}
		return len(ks.keys), nil
	}
	absentChanged := t.freeVer > since
	n := 0
	cur := -1
	var ver []uint64
	for i, r := range ks.rows {
		b := uint64(1) << (i & 63)
		if sel[i>>6]&b != 0 {
			n++
			continue
		}
		var changed bool
		if r < 0 {
			changed = absentChanged
		} else {
			if pi := int(r) >> t.pageShift; pi != cur {
				cur, ver = pi, t.pages[pi].ver
			}
			changed = ver[int(r)&t.pageMask] > since
		}
		if changed {
			sel[i>>6] |= b
			n++
		}
	}
	return n, nil
}
