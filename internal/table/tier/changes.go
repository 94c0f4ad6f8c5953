package tier

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/paramserv/paramserv/internal/table/sparse"
)

// Change tracking across the tiers, for incremental checkpoints. The hot
// table marks the rows created or changed since the last cut (its dirty
// bits, sparse.Table.ResetChanges). A row that moves to disk takes its
// mark with it: Demote keeps the keys of the changed rows it moved
// (changeLog.dirty), and Fetch hands the mark back to the hot table with
// the row. A delta cut (CutChanges) then holds the hot table's changed rows
// and the disk tier's, read from the cut's store snapshot.
//
// Deletions: a row found on disk past the eviction cutoff and dropped is
// remembered (changeLog.drops). Rows still on disk whose last touch fell
// behind the cutoff since the last cut are no longer in the table either
// (Evict would have dropped them in memory): when the cutoff moved, the
// cut finds them by reading the keys and last touches of every row on
// disk at the cut, with no lock held (a read of the store, not a write).
//
// The keys kept are bounded (maxChanged): a table whose rows on disk
// change more than that between two cuts forgets them, and its next
// checkpoint is a full one, as the hot table does with its evictions.

// changeLog is what changed in a table's disk tier since the last cut.
// Guarded by the owner's lock, as the Table.
type changeLog struct {
	on     bool                // tracking: the hot table's changes are known
	lost   bool                // more keys than kept: the next cut must be full
	dirty  map[uint64]struct{} // keys whose row on disk changed since the last cut
	drops  []uint64            // keys dropped on disk past eviction since the last cut
	cutoff int64               // the hot table's eviction cutoff at the last cut
}

// maxChangedFloor is the fewest changed keys on disk a table keeps
// between two cuts; beyond it, one for every 16 rows on disk.
const maxChangedFloor = 1 << 16

func maxChanged(onDisk int64) int { return max(maxChangedFloor, int(onDisk/16)) }

// start begins tracking as the hot table does: a table attached or
// restored starts with nothing changed on disk.
func (c *changeLog) start(hot *sparse.Table) {
	*c = changeLog{on: hot.ChangesKnown(), dirty: make(map[uint64]struct{}), cutoff: hot.EvictedBefore()}
}

// enter records that k's changed row moved to disk.
func (c *changeLog) enter(k uint64, onDisk int64) {
	if !c.on || c.lost {
		return
	}
	if len(c.dirty)+len(c.drops) >= maxChanged(onDisk) {
		c.forget()
		return
	}
	c.dirty[k] = struct{}{}
}

// leave reports whether k's row, leaving the disk tier, had changed since
// the last cut, and forgets it.
func (c *changeLog) leave(k uint64) bool {
	if _, ok := c.dirty[k]; ok {
		delete(c.dirty, k)
		return true
	}
	return false
}

// dropped records that k's row, last touched at touch, was found past the
// eviction cutoff and dropped: a row the last cut may hold.
func (c *changeLog) dropped(k uint64, touch, onDisk int64) {
	if !c.on || c.lost || touch < c.cutoff {
		return
	}
	if len(c.dirty)+len(c.drops) >= maxChanged(onDisk) {
		c.forget()
		return
	}
	c.drops = append(c.drops, k)
}

func (c *changeLog) forget() {
	c.lost, c.dirty, c.drops = true, make(map[uint64]struct{}), nil
}

// ChangesKnown reports whether CutChanges can say what changed on disk
// since the last cut: tracking is on (ResetChanges was called, or the table
// was attached to a hot table tracking its changes) and no key was
// forgotten.
func (t *Table) ChangesKnown() bool { return t.changes.on && !t.changes.lost }

// ResetChanges starts a new interval of change tracking, with the hot
// table's ResetChanges: at a full cut, and after a restore.
func (t *Table) ResetChanges() {
	t.changes.start(t.hot)
	t.changes.on = true
}

// ChangesCut is a view of the rows of a table's disk tier changed since
// the last cut, and of the keys it dropped, taken under the owner's lock
// with the hot table's FrozenChanges, read with no lock held.
type ChangesCut struct {
	cut   *Cut
	keys  []uint64 // keys whose row on disk changed, unsorted
	drops []uint64 // keys dropped on disk past eviction
	from  int64    // the eviction cutoff at the last cut
}

// CutChanges takes a view of what changed in the disk tier since the last
// cut (ResetChanges or CutChanges) and starts a new interval. Call it only
// where ChangesKnown; Release the result.
func (t *Table) CutChanges() *ChangesCut {
	cc := &ChangesCut{cut: t.Cut(), keys: slices.Collect(maps.Keys(t.changes.dirty)), drops: t.changes.drops, from: t.changes.cutoff}
	clear(t.changes.dirty)
	t.changes.drops, t.changes.cutoff = nil, cc.cut.cutoff
	return cc
}

// Release lets go of the view's store snapshot.
func (cc *ChangesCut) Release() { cc.cut.Release() }

// Merge returns hot, the hot table's changed rows at the cut (ascending),
// with the disk tier's changed rows, in key order, and deleted with the
// keys no longer in the table that the last cut may hold: those dropped
// on disk, and, where the eviction cutoff moved since the last cut, those
// on disk whose last touch fell behind it.
func (cc *ChangesCut) Merge(hot sparse.Snapshot, deleted []uint64) (sparse.Snapshot, []uint64, error) {
	deleted = append(deleted, cc.drops...)
	c := cc.cut
	if c.emptied {
		return hot, deleted, nil
	}
	t := c.t
	rows := sparse.Snapshot{Dim: c.dim, State: make([][]float32, t.slots), LastTouch: []int64{}}
	if c.counts {
		rows.Updates = []uint32{}
	}
	if c.err != nil {
		return hot, deleted, c.err
	}
	slices.Sort(cc.keys)
	size := t.rowLen()
	var need []uint64 // the keys not in the changes at the cut, to read from the view
	for _, k := range cc.keys {
		if _, ok := c.pend[k]; !ok {
			need = append(need, k)
		}
	}
	found := make([]byte, len(need)*size)
	got := make([]bool, len(need))
	var bad error
	err := c.view.get(need, func(i int, row []byte) {
		if len(row) != size && bad == nil {
			bad = fmt.Errorf("key %d: row of %d bytes, want %d", need[i], len(row), size)
		}
		copy(found[i*size:(i+1)*size], row)
		got[i] = true
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return hot, deleted, fmt.Errorf("%w: reading %s: %w", ErrStore, t.store.dir, err)
	}
	j := 0
	for _, k := range cc.keys {
		var row []byte
		if e, ok := c.pend[k]; ok {
			row = e.row
		} else {
			if got[j] {
				row = found[j*size : (j+1)*size]
			}
			j++
		}
		if row == nil { // not on disk at the cut
			continue
		}
		if int64(binary.LittleEndian.Uint64(row[4:])) < c.cutoff {
			continue // evicted: the scan below finds it
		}
		t.decode(&rows, k, row)
	}
	if c.cutoff > cc.from {
		err := c.each(func(k uint64, row []byte) {
			if touch := int64(binary.LittleEndian.Uint64(row[4:])); touch >= cc.from && touch < c.cutoff {
				deleted = append(deleted, k)
			}
		})
		if err != nil {
			return hot, deleted, err
		}
	}
	return Merge(hot, rows), deleted, nil
}

// each calls fn with every row of the cut (the store's view under the
// changes not yet written), in no set order.
func (c *Cut) each(fn func(k uint64, row []byte)) error {
	t := c.t
	size := t.rowLen()
	var bad error
	err := c.view.scan(func(k uint64, row []byte) {
		if _, ok := c.pend[k]; ok {
			return
		}
		if len(row) != size {
			if bad == nil {
				bad = fmt.Errorf("key %d: row of %d bytes, want %d", k, len(row), size)
			}
			return
		}
		fn(k, row)
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return fmt.Errorf("%w: reading %s: %w", ErrStore, t.store.dir, err)
	}
	for k, e := range c.pend {
		if e.row != nil {
			fn(k, e.row)
		}
	}
	return nil
}
