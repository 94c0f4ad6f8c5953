package tier

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	mbits "math/bits"
	"slices"
)

// Writing a batch of changes to the hash store in spans of pages.
//
// A system call costs more than the bytes it moves: on the machine the
// tier was measured on (CPU time, 4 KiB pages of the page cache), a pwrite
// of 32 bytes into a clean page costs about 7 µs, a pwrite of 64 KiB to 1
// MiB 0.7–1.9 µs a page; a pread of 4 KiB 3.4 µs, a longer one about 1 µs
// a page. So a write sorts its changes by page and joins pages that lie
// close together in the file (at most spanGap bytes of untouched pages
// between two changed ones) into
// one span, which it reads with one pread, changes in memory, and writes
// back with one pwrite: the untouched pages between are written with the
// bytes they had. A lone page with one or two changes whose slots are
// known is written slot by slot as before (no read). Deleting a row whose
// slot a lookup found (a promotion) writes nothing: its bit is cleared.
//
// A lookup reads the pages of its keys the same way: sorted, pages within
// readGap of each other in one pread.
//
// The background loop gathers changes until a write is worth it (see
// Table.batch), so that a write covers many rows a page.

// spanGap is the most bytes of untouched pages a span reads and writes
// again to join two changed pages: about 2.5 µs a 4 KiB page, against the
// 10 µs of the pread and pwrite it saves (figures above).
var spanGap = 12 << 10

// readGap is the most bytes of pages no key needs that a lookup reads to
// join two pages into one pread: about 1 µs a 4 KiB page, against the 3.4
// µs of the pread it saves.
var readGap = 8 << 10

// spanMax is the most bytes of one span (its buffer, and the time the
// file's lock is held for it).
const spanMax = 1 << 20

// write applies changes (a row, or a deletion where row is nil).
func (h *hashFile) write(ch []change) error {
	if err := h.e.Err(); err != nil {
		return err
	}
	if err := h.writeSpans(ch); err != nil {
		return h.e.fail(fmt.Errorf("%s: %w", h.name, err))
	}
	return nil
}

func (h *hashFile) writeSpans(ch []change) error {
	// Deletions of rows a lookup found: their bits, no I/O. The others'
	// pages, in file order. Only this writer changes the directory, so
	// the pages found stay the changes' pages (a split in the write
	// moves only the rows of the page it splits, all in one group).
	ids := make([]uint32, len(ch))
	order := make([]int32, 0, len(ch))
	h.mu.Lock()
	for i := range ch {
		c := &ch[i]
		if loc, ok := h.located[c.key]; ok && c.row == nil {
			delete(h.located, c.key)
			h.occ[loc/hashSlotsMax] &^= 1 << (loc % hashSlotsMax)
			continue
		}
		ids[i] = h.pageOf(c.key)
		order = append(order, int32(i))
	}
	h.mu.Unlock()
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(ids[a], ids[b]) })
	gap := uint32(spanGap / h.page)
	most := uint32(max(1, spanMax/h.page))
	for i := 0; i < len(order); {
		j := spanEnd(ids, order, i, gap, most)
		if err := h.writeSpan(ch, ids, order[i:j]); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// writeSpan applies the changes of span (sorted by page, all within a
// span's reach) under the file's lock.
func (h *hashFile) writeSpan(ch []change, ids []uint32, span []int32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	first, last := ids[span[0]], ids[span[len(span)-1]]
	if first == last && h.slotwise(ch, span, first) {
		return h.writeSlots(ch, span, first)
	}
	n := int(last-first+1) * h.page
	if cap(h.span) < n {
		h.span = make([]byte, n)
	}
	buf := h.span[:n]
	off := int64(first) * int64(h.page)
	read := len(h.views) > 0
	for id := first; id <= last && !read; id++ {
		read = h.occ[id] != 0
	}
	if read {
		got, err := h.f.ReadAt(buf, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading pages %d to %d: %w", first, last, err)
		}
		clear(buf[got:])
	} else {
		clear(buf)
	}
	var split [][]int32 // groups whose rows do not fit their page: split after the span is written
	for i := 0; i < len(span); {
		id := ids[span[i]]
		j := i + 1
		for j < len(span) && ids[span[j]] == id {
			j++
		}
		fits, err := h.applyPage(ch, span[i:j], id, buf[int(id-first)*h.page:int(id-first+1)*h.page])
		if err != nil {
			return err
		}
		if !fits {
			split = append(split, span[i:j])
		}
		i = j
	}
	if _, err := h.f.WriteAt(buf, off); err != nil {
		return err
	}
	for _, g := range split {
		id := ids[g[0]]
		d := uint(h.local[id])
		if err := h.rewrite(ch, g, id, top(hashKey(ch[g[0]].key), d), d); err != nil {
			return err
		}
	}
	return nil
}

// slotwise says whether a lone page's group of changes is cheaper written
// slot by slot (see writeSlots): one or two changes, each of a row whose
// slot is known or of a new row with a free slot. (A page's write is two
// calls, read and write, a slot's one.)
func (h *hashFile) slotwise(ch []change, group []int32, id uint32) bool {
	if len(group) > 2 {
		return false
	}
	free := h.slots - mbits.OnesCount64(h.occ[id])
	for _, c := range group {
		c := &ch[c]
		_, at := h.located[c.key]
		switch {
		case c.row == nil || c.over:
			if !at {
				return false
			}
		default:
			if free--; free < 0 {
				return false
			}
		}
	}
	return true
}

// applyPage applies a group of changes to page id, whose bytes are p (read
// from the file, or zero where the page holds nothing), and updates its
// bitmap. It returns false, leaving p and the bitmap as they were, if the
// page's rows would not fit (rewrite then writes the group, splitting the
// page). Called with mu held.
func (h *hashFile) applyPage(ch []change, group []int32, id uint32, p []byte) (bool, error) {
	occ := h.occ[id]
	if err := h.check(p, id, occ); err != nil {
		return false, err
	}
	free := h.slots - mbits.OnesCount64(occ)
	for _, c := range group {
		c := &ch[c]
		switch found := h.find(p, occ, c.key) >= 0; {
		case c.row == nil && found:
			free++
		case c.row != nil && !found:
			free--
		}
	}
	if free < 0 {
		return false, nil
	}
	h.old = append(h.old[:0], p...)
	var touched uint64
	for _, c := range group { // deletions first, freeing their slots
		c := &ch[c]
		if c.row != nil {
			continue
		}
		delete(h.located, c.key)
		if s := h.find(p, occ, c.key); s >= 0 {
			occ &^= 1 << s
		}
	}
	for _, c := range group {
		c := &ch[c]
		if c.row == nil {
			continue
		}
		delete(h.located, c.key)
		s := h.find(p, occ, c.key)
		if s < 0 {
			s = mbits.TrailingZeros64(^occ)
		}
		h.fill(p, s, c.key, c.row)
		occ |= 1 << s
		touched |= 1 << s
	}
	if err := h.saveForViews(id, touched, h.old); err != nil {
		return false, err
	}
	h.occ[id] = occ
	return true, nil
}

// get calls fn(i, row) for each of keys found (row only valid during fn),
// in no set order.
func (h *hashFile) get(keys []uint64, fn func(i int, row []byte)) error {
	if err := h.e.Err(); err != nil {
		return err
	}
	h.mu.Lock() // located is written
	defer h.mu.Unlock()
	ids := make([]uint32, len(keys))
	order := make([]int32, 0, len(keys))
	for i, k := range keys {
		id := h.pageOf(k)
		if h.occ[id] != 0 {
			ids[i] = id
			order = append(order, int32(i))
		}
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(ids[a], ids[b]) })
	gap := uint32(readGap / h.page)
	most := uint32(max(1, spanMax/4/h.page))
	for i := 0; i < len(order); {
		first := ids[order[i]]
		j := spanEnd(ids, order, i, gap, most)
		n := int(ids[order[j-1]]-first+1) * h.page
		if cap(h.span) < n {
			h.span = make([]byte, n)
		}
		buf := h.span[:n]
		got, err := h.f.ReadAt(buf, int64(first)*int64(h.page))
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: reading pages %d to %d: %w", h.name, first, ids[order[j-1]], err)
		}
		clear(buf[got:])
		for k := i; k < j; k++ {
			id := ids[order[k]]
			p := buf[int(id-first)*h.page : int(id-first+1)*h.page]
			if k == i || ids[order[k-1]] != id {
				if err := h.check(p, id, h.occ[id]); err != nil {
					return fmt.Errorf("%s: %w", h.name, err)
				}
			}
			key := keys[order[k]]
			if s := h.find(p, h.occ[id], key); s >= 0 {
				h.located[key] = id*hashSlotsMax + uint32(s)
				fn(int(order[k]), p[s*h.slot+12:(s+1)*h.slot])
			}
		}
		i = j
	}
	return nil
}

// spanEnd returns the end of the span that starts at order[i]: the pages
// ids[order[i:j]] (order sorted by page) are no more than gap pages apart,
// each from the one before, and fewer than most from the first.
func spanEnd(ids []uint32, order []int32, i int, gap, most uint32) int {
	first := ids[order[i]]
	j := i + 1
	for j < len(order) {
		id := ids[order[j]]
		if id-ids[order[j-1]] > gap+1 || id-first >= most {
			break
		}
		j++
	}
	return j
}
