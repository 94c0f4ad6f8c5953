package tier

import "fmt"

// The memory bound. The background loop keeps the rows in memory near the
// budget, but a round writes its rows to disk with the lock released, and
// while it writes (seconds under load, for a round of many rows) pushes go
// on adding rows: a table that grows fast (many new keys a push) ran to
// seven times its budget before the next round. So a Fetch that would take
// the rows a ps holds in memory (the hot tables, and the rows pending or
// in flight to disk) past the budget and a margin does the loop's work on
// the request's path, under the lock: it waits for the writes in flight
// (or writes them itself if the loop has not started them), demotes the
// coldest rows of its table, not the request's, down to the budget less
// the request's new rows, and writes them at once. Pushes wait meanwhile:
// the wait is for the ps's own disk writes, which end (a failed one fails
// the tier).

// boundMargin is the margin over the budget the rows in memory may reach
// before a Fetch demotes on the request's path: a quarter of the budget,
// at least 256 KiB.
func boundMargin(budget int64) int64 { return max(budget/4, 256<<10) }

// memBound is the memory bound the tables of one budget share.
type memBound struct {
	budget, margin int64
	tables         func() []*Table
	stalls         int64 // Fetches that demoted on the request's path
}

// held is the memory the tables' rows take: in the hot tables, and pending
// or in flight to disk (a change pending is counted as a row).
func (b *memBound) held() int64 {
	var n int64
	for _, t := range b.tables() {
		n += int64(t.hot.Len()+len(t.pend)+len(t.flight)) * t.RowBytes()
	}
	return n
}

// hold keeps the memory of the rows within the bound as keys come: if the
// rows in memory and keys' rows not in the table (which the request may
// add) would pass the budget and the margin, it ends every write in
// flight, demotes rows of t other than keys' down to the budget, and
// writes them (see above). Called by Fetch, under the owner's lock; it
// leaves in t.miss the keys of keys not in the hot table, for Fetch.
func (t *Table) hold(keys []uint64) error {
	b := t.bound
	if b == nil {
		return nil
	}
	rb := t.RowBytes()
	t.miss = t.hot.Missing(keys, t.miss[:0])
	incoming := int64(len(t.miss)) * rb
	held := b.held()
	if held+incoming <= b.budget+b.margin {
		return nil
	}
	b.stalls++
	// The writes in flight: waited for where the loop writes them now,
	// written here where it has not started.
	for _, o := range b.tables() {
		if f := o.flying; f != nil {
			o.EndFlush(f, f.Write())
		}
	}
	if n := (held + incoming - b.budget + rb - 1) / rb; n > 0 {
		except := make(map[uint64]struct{}, len(keys))
		for _, k := range keys {
			except[k] = struct{}{}
		}
		// The rows promoted lately too, if need be: most are for pushes
		// still to come, which will read them back (the loop leaves them),
		// but the memory comes first.
		if m := t.demoteExcept(int(n), except, false); m < int(n) {
			t.demoteExcept(int(n)-m, except, true)
		}
	}
	if err := t.Flush(); err != nil {
		return err
	}
	for _, o := range b.tables() {
		if err := o.Err(); err != nil {
			if o != t {
				err = fmt.Errorf("another table's tier: %w", err)
			}
			return err
		}
	}
	return nil
}

// Bound makes Fetch keep the memory of t's rows within budget and margin
// bytes (for a table outside a Manager; a Manager bounds its tables
// together).
func (t *Table) Bound(budget, margin int64) {
	t.bound = &memBound{budget: budget, margin: margin, tables: func() []*Table { return []*Table{t} }}
}

// Stalls counts the Fetches that had to demote rows on the request's path
// to keep memory within the bound.
func (t *Table) Stalls() int64 {
	if t.bound == nil {
		return 0
	}
	return t.bound.stalls
}
