package tier

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	mbits "math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The hash store: a table's rows on disk in a file of fixed-size pages of
// fixed-size slots (CRC, key, row), a key's page found by its hash through
// a directory in memory (extendible hashing: the directory has 2^depth
// entries, indexed by the top depth bits of the hash; a page that
// overflows splits in two by its next bit, and the directory doubles when
// a page's depth passes its own).
//
// Which slots of a page hold a row is kept in memory (a bitmap a page,
// about a bit a row), not on disk, so that
//   - a deletion (a row promoted) writes nothing: its bit is cleared;
//   - a row written (demoted) is one write of its slot, in a slot free in
//     the bitmap, with no read first;
//   - a lookup is one read of one page.
//
// Reads and writes go through the page cache with pread and pwrite, not a
// mapping: the process's resident memory stays the budget's. Nothing is
// rewritten in the background (no compactions). A batch that changes many
// rows of one page (a restore) reads and writes the whole page once.
//
// Each slot carries a CRC-32C of its key and row, checked for every slot
// in use of a page read: a damaged row fails the read (ErrStore).
//
// A view (a consistent cut, for checkpoints, while writes go on) keeps a
// copy of the directory and the bitmaps; a write into a slot a live view
// sees in use first copies the page's old bytes to the view's own file
// (copy on write). Pages are never freed or moved, so the view reads a
// page from its file when it was copied and from the table's file
// otherwise.
//
// The store is memory that spills (see OpenStore): nothing is synced, and
// a crash leaves nothing to recover.

// hashSlotsMax is the most slots a page holds (a bitmap is a uint64).
const hashSlotsMax = 64

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var errDamaged = errors.New("damaged row")

// hashEngine is the hash store of one ps: a hashFile per table.
type hashEngine struct {
	dir   string
	fs    vfs.FS
	bytes atomic.Int64          // the size of every file
	err   atomic.Pointer[error] // the first write error: a file may then be half written
	views atomic.Int64          // names view files apart
}

func (e *hashEngine) fail(err error) error {
	e.err.CompareAndSwap(nil, &err)
	return err
}

func (e *hashEngine) Err() error {
	if p := e.err.Load(); p != nil {
		return *p
	}
	return nil
}

// open makes the file of the table with prefix, whose rows are rowLen
// bytes: pages of up to 64 slots and about 4 KiB (at least 8 slots).
func (e *hashEngine) open(prefix uint32, rowLen int) (*hashFile, error) {
	slot := 12 + rowLen
	n := min(hashSlotsMax, max(8, 4096/slot))
	h := &hashFile{
		e: e, name: e.fs.PathJoin(e.dir, fmt.Sprintf("table-%d.hash", prefix)),
		rowLen: rowLen, slot: slot, slots: n, page: n * slot,
		dir: []uint32{0}, occ: []uint64{0}, local: []uint8{0}, pages: 1,
		located: make(map[uint64]uint32),
	}
	f, err := createRW(e.fs, h.name)
	if err != nil {
		return nil, err
	}
	h.f = f
	h.buf = make([]byte, h.page)
	// Page 0 (empty: its slots are free in the bitmap) is the whole table's.
	e.bytes.Add(int64(h.page))
	return h, nil
}

func createRW(fs vfs.FS, name string) (vfs.File, error) {
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
}

// hashFile is one table's rows.
//
// Concurrency: mu guards every field below it and the file's bytes; a
// write holds it exclusively while it changes a page (and the pages a
// split makes), reads share it. Writes come from one goroutine at a time
// (the Table's flight, or Load), so buf, the writer's buffer, needs no
// more.
type hashFile struct {
	e      *hashEngine
	name   string
	rowLen int
	slot   int // bytes per slot: CRC (4), key (8), row
	slots  int // slots per page
	page   int // bytes per page

	mu      sync.RWMutex
	f       vfs.File
	depth   uint     // the directory's
	dir     []uint32 // the page of each hash prefix of depth bits
	occ     []uint64 // by page: the slots in use
	local   []uint8  // by page: its depth
	pages   uint32
	views   []*hashView
	dropped bool // the table's rows are gone; the file goes with the last view
	// located is where get found keys (page*64 + slot), so that their
	// deletion, which comes next, needs no read. Bounded by the rows
	// promoted and not yet deleted (a flight's).
	located map[uint64]uint32

	alloc    int64 // the file's bytes reserved (grow)
	buf, old []byte
	span     []byte // a write's or a lookup's span of pages, under mu (hashsweep.go)
}

// hashKey is the page-finding hash of a key: splitmix64's finaliser, a
// bijection, so distinct keys have distinct hashes and any page splits
// apart in the end.
func hashKey(k uint64) uint64 {
	x := k + 0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func top(h uint64, bits uint) uint64 {
	if bits == 0 {
		return 0
	}
	return h >> (64 - bits)
}

// all is the bitmap of a full page.
func (h *hashFile) all() uint64 {
	if h.slots == 64 {
		return ^uint64(0)
	}
	return uint64(1)<<h.slots - 1
}

func (h *hashFile) pageOf(k uint64) uint32 { return h.dir[top(hashKey(k), h.depth)] }

// readPage reads page id of f at off into p and checks the slots occ
// says are in use. Its errors name the page, not the file: the caller
// names it.
func (h *hashFile) readPage(f vfs.File, off int64, p []byte, id uint32, occ uint64) error {
	if _, err := f.ReadAt(p, off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading page %d: %w", id, err)
	}
	return h.check(p, id, occ)
}

// check checks the CRC of the slots of page id (its bytes p) that occ
// says are in use.
func (h *hashFile) check(p []byte, id uint32, occ uint64) error {
	for o := occ; o != 0; o &= o - 1 {
		s := mbits.TrailingZeros64(o)
		b := p[s*h.slot : (s+1)*h.slot]
		if binary.LittleEndian.Uint32(b) != crc32.Checksum(b[4:], castagnoli) {
			return fmt.Errorf("page %d, slot %d: %w (checksum)", id, s, errDamaged)
		}
	}
	return nil
}

// find is the slot of key k among a page's slots in use, or -1.
func (h *hashFile) find(p []byte, occ uint64, k uint64) int {
	for o := occ; o != 0; o &= o - 1 {
		s := mbits.TrailingZeros64(o)
		if binary.LittleEndian.Uint64(p[s*h.slot+4:]) == k {
			return s
		}
	}
	return -1
}

// fill writes key k's row into slot s of p, with its CRC.
func (h *hashFile) fill(p []byte, s int, k uint64, row []byte) {
	b := p[s*h.slot : (s+1)*h.slot]
	binary.LittleEndian.PutUint64(b[4:], k)
	copy(b[12:], row)
	binary.LittleEndian.PutUint32(b, crc32.Checksum(b[4:], castagnoli))
}

// reserveFill is how full reserve makes pages (a variable so that a test
// can overfill them, to split them).
var reserveFill = 0.75

// reserve sizes an empty file's directory for n rows (a restore that
// knows how many it writes), so that they go to pages of about
// three-quarters full with no splits.
func (h *hashFile) reserve(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pages != 1 || h.occ[0] != 0 || len(h.views) > 0 {
		return
	}
	var d uint
	for d < 40 && float64(n) > reserveFill*float64(h.slots)*float64(uint64(1)<<d) {
		d++
	}
	pages := 1 << d
	h.depth, h.pages = d, uint32(pages)
	h.dir = make([]uint32, pages)
	for i := range h.dir {
		h.dir[i] = uint32(i)
	}
	h.occ, h.local = make([]uint64, pages), make([]uint8, pages)
	for i := range h.local {
		h.local[i] = uint8(d)
	}
	h.e.bytes.Add(int64(pages-1) * int64(h.page))
	h.grow()
}

// grow reserves the file's blocks past its last page (fallocate, in steps
// of 4 MiB), so that pages written at random offsets land in blocks laid
// out in order. Called with mu held; an error is left to the writes.
func (h *hashFile) grow() {
	end := int64(h.pages) * int64(h.page)
	if end <= h.alloc {
		return
	}
	n := max(end-h.alloc, 4<<20)
	if h.f.Preallocate(h.alloc, n) == nil {
		h.alloc += n
	}
}

// load writes n rows (the key of row j is key(j), its bytes written by
// row(j, dst)) into pages that hold none yet (an empty file, its directory
// sized for them by reserve; or a file reserved for more, a range of its
// pages at a time: loadSpill): rows ordered by hash, each page written
// once, in order, several pages a write. Its memory beside the rows is 12
// bytes a row and 1 MiB. Where a page holds rows already, it is a write.
func (h *hashFile) load(n int, key func(j int) uint64, row func(j int, dst []byte)) error {
	if err := h.e.Err(); err != nil {
		return err
	}
	h.reserve(n)
	h.mu.Lock()
	defer h.mu.Unlock()
	empty := len(h.views) == 0 && n > 0
	var hs []uint64
	if empty {
		hs = make([]uint64, n)
		for j := range hs {
			hs[j] = hashKey(key(j))
			if h.occ[h.dir[top(hs[j], h.depth)]] != 0 {
				empty = false
				break
			}
		}
	}
	if !empty {
		h.mu.Unlock()
		defer h.mu.Lock()
		// Not empty: the usual write.
		ch := make([]change, n)
		for j := range ch {
			ch[j] = change{key: key(j), row: make([]byte, h.rowLen)}
			row(j, ch[j].row)
		}
		slices.SortFunc(ch, func(a, b change) int { return cmp.Compare(a.key, b.key) })
		return h.write(ch)
	}
	order := make([]int32, n)
	for j := range order {
		order[j] = int32(j)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(hs[a], hs[b]) })
	// Pages are written from out, up to 1 MiB of consecutive ones at a time.
	per := max(1, (1<<20)/h.page)
	out := make([]byte, 0, per*h.page)
	first := uint32(0)
	flush := func() error {
		if len(out) == 0 {
			return nil
		}
		_, err := h.f.WriteAt(out, int64(first)*int64(h.page))
		out = out[:0]
		return err
	}
	fail := func(err error) error { return h.e.fail(fmt.Errorf("%s: %w", h.name, err)) }
	for i := 0; i < n; {
		// The rows of one page: those of its prefix, of its own depth
		// (a split, here or in an earlier load, may have doubled the
		// directory past it).
		id := h.dir[top(hs[order[i]], h.depth)]
		d := uint(h.local[id])
		pre := top(hs[order[i]], d)
		m := i + 1
		for m < n && top(hs[order[m]], d) == pre {
			m++
		}
		if m-i > h.slots {
			// More rows than a page holds: split, as a write would.
			if err := flush(); err != nil {
				return fail(err)
			}
			rows := make([]change, 0, m-i)
			for _, j := range order[i:m] {
				r := make([]byte, h.rowLen)
				row(int(j), r)
				rows = append(rows, change{key: key(int(j)), row: r})
			}
			if err := h.place(rows, id, pre, d); err != nil {
				return fail(err)
			}
			i = m
			continue
		}
		if len(out) > 0 && (id != first+uint32(len(out)/h.page) || len(out) == cap(out)) {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
		if len(out) == 0 {
			first = id
		}
		// The page and any empty ones before it in the run.
		for first+uint32(len(out)/h.page) <= id {
			out = append(out, make([]byte, h.page)...)
		}
		p := out[len(out)-h.page:]
		for s, j := range order[i:m] {
			b := p[s*h.slot : (s+1)*h.slot]
			row(int(j), b[12:12:h.slot])
			binary.LittleEndian.PutUint64(b[4:], key(int(j)))
			binary.LittleEndian.PutUint32(b, crc32.Checksum(b[4:], castagnoli))
		}
		if m-i == 64 {
			h.occ[id] = ^uint64(0)
		} else {
			h.occ[id] = uint64(1)<<(m-i) - 1
		}
		i = m
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	return nil
}

// writeSlots applies a group of changes to page id a slot at a time.
func (h *hashFile) writeSlots(ch []change, group []int32, id uint32) error {
	p := h.buf
	for _, c := range group {
		c := &ch[c]
		s := -1
		if loc, ok := h.located[c.key]; ok {
			delete(h.located, c.key)
			s = int(loc % hashSlotsMax)
			if c.row == nil {
				h.occ[id] &^= 1 << s
				continue
			}
		}
		if s < 0 {
			s = mbits.TrailingZeros64(^h.occ[id])
		}
		if err := h.saveForViews(id, 1<<s); err != nil {
			return err
		}
		h.fill(p, s, c.key, c.row)
		if _, err := h.f.WriteAt(p[s*h.slot:(s+1)*h.slot], int64(id)*int64(h.page)+int64(s*h.slot)); err != nil {
			return err
		}
		h.occ[id] |= 1 << s
	}
	return nil
}

// rewrite applies a group of changes to page id (of depth d, for hashes
// of prefix pre) by reading it, changing it and writing it whole,
// splitting it if its rows no longer fit.
func (h *hashFile) rewrite(ch []change, group []int32, id uint32, pre uint64, d uint) error {
	p := h.buf
	off := int64(id) * int64(h.page)
	occ := h.occ[id]
	if occ != 0 || len(h.views) > 0 { // an empty page need not be read, unless a view may want its old rows
		if err := h.readPage(h.f, off, p, id, occ); err != nil {
			return err
		}
	}
	old := append(h.old[:0], p...)
	var touched uint64
	var extra []change // rows past the page's room
	for _, c := range group {
		c := &ch[c]
		delete(h.located, c.key)
		s := h.find(p, occ, c.key)
		switch {
		case c.row == nil:
			if s >= 0 {
				occ &^= 1 << s
			}
			continue
		case s < 0 && occ != h.all():
			s = mbits.TrailingZeros64(^occ)
		case s < 0:
			extra = append(extra, *c)
			continue
		}
		h.fill(p, s, c.key, c.row)
		occ |= 1 << s
		touched |= 1 << s
	}
	if len(extra) == 0 {
		if err := h.saveForViews(id, touched, old); err != nil {
			return err
		}
		h.occ[id] = occ
		_, err := h.f.WriteAt(p, off)
		return err
	}
	// Split: the page's rows and the extra, into pages of depth d+1 and
	// more until each fits.
	if err := h.saveForViews(id, ^uint64(0), old); err != nil {
		return err
	}
	var rows []change
	for o := occ; o != 0; o &= o - 1 {
		s := mbits.TrailingZeros64(o)
		b := p[s*h.slot : (s+1)*h.slot]
		k := binary.LittleEndian.Uint64(b[4:])
		delete(h.located, k)
		rows = append(rows, change{key: k, row: slices.Clone(b[12:])})
	}
	return h.place(append(rows, extra...), id, pre, d)
}

// place writes rows, whose hashes share the prefix pre of d bits, into
// page id (and new pages), splitting by the next bits until each fits.
func (h *hashFile) place(rows []change, id uint32, pre uint64, d uint) error {
	if len(rows) <= h.slots {
		p := make([]byte, h.page)
		for s, r := range rows {
			h.fill(p, s, r.key, r.row)
		}
		h.occ[id] = uint64(1)<<len(rows) - 1
		if len(rows) == 64 {
			h.occ[id] = ^uint64(0)
		}
		h.local[id] = uint8(d)
		_, err := h.f.WriteAt(p, int64(id)*int64(h.page))
		return err
	}
	if d == 64 {
		return fmt.Errorf("%d rows with one hash", len(rows))
	}
	var lo, hi []change
	for _, r := range rows {
		if top(hashKey(r.key), d+1)&1 == 0 {
			lo = append(lo, r)
		} else {
			hi = append(hi, r)
		}
	}
	if d+1 > h.depth {
		// Double the directory: each entry for both halves of its range.
		dir := make([]uint32, 2*len(h.dir))
		for i, p := range h.dir {
			dir[2*i], dir[2*i+1] = p, p
		}
		h.dir, h.depth = dir, h.depth+1
	}
	nid := h.pages
	h.pages++
	h.occ, h.local = append(h.occ, 0), append(h.local, 0)
	h.e.bytes.Add(int64(h.page))
	h.grow()
	// The entries of the upper half (prefix pre<<1|1 of d+1 bits) point at
	// the new page.
	shift := h.depth - (d + 1)
	first := (pre<<1 | 1) << shift
	for i := first; i < first+1<<shift; i++ {
		h.dir[i] = nid
	}
	if err := h.place(lo, id, pre<<1, d+1); err != nil {
		return err
	}
	return h.place(hi, nid, pre<<1|1, d+1)
}

// saveForViews copies page id's bytes (old, or read from the file if none
// given) to the file of every live view that sees a row in a slot of
// touched and has no copy yet. Called with mu held.
func (h *hashFile) saveForViews(id uint32, touched uint64, old ...[]byte) error {
	for _, v := range h.views {
		if id >= v.pages || v.occ[id]&touched == 0 || v.saved[id] != 0 {
			continue
		}
		if len(old) == 0 {
			p := make([]byte, h.page)
			if _, err := h.f.ReadAt(p, int64(id)*int64(h.page)); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			old = append(old, p)
		}
		if v.err == nil {
			if _, err := v.f.WriteAt(old[0], v.size); err != nil {
				v.err = err
			}
		}
		v.size += int64(h.page)
		h.e.bytes.Add(int64(h.page))
		v.saved[id] = v.size // the copy's end: 0 means none
	}
	return nil
}

// newView takes a consistent view of the table's rows now.
func (h *hashFile) newView() (*hashView, error) {
	name := h.e.fs.PathJoin(h.e.dir, fmt.Sprintf("%s.view-%d", h.name[len(h.e.dir)+1:], h.e.views.Add(1)))
	f, err := createRW(h.e.fs, name)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	v := &hashView{h: h, f: f, name: name, depth: h.depth, dir: slices.Clone(h.dir), occ: slices.Clone(h.occ), pages: h.pages, saved: make(map[uint32]int64)}
	h.views = append(h.views, v)
	return v, nil
}

// drop deletes the table's file (once no view needs it).
func (h *hashFile) drop() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropped = true
	if len(h.views) > 0 {
		return nil
	}
	return h.remove()
}

// remove closes and deletes the file; mu held.
func (h *hashFile) remove() error {
	err := h.f.Close()
	if rmErr := h.e.fs.Remove(h.name); err == nil {
		err = rmErr
	}
	h.e.bytes.Add(-int64(h.pages) * int64(h.page))
	return err
}

// hashView is a hashFile as it was when the view was taken.
type hashView struct {
	h     *hashFile
	f     vfs.File // the copies of pages written since
	name  string
	depth uint
	dir   []uint32
	occ   []uint64
	pages uint32
	// Guarded by h.mu.
	saved map[uint32]int64 // page → the end of its copy in f
	size  int64
	err   error // a copy that failed: the view cannot be read
}

// readPage reads page id as the view sees it. Called with h.mu held (read).
func (v *hashView) readPage(p []byte, id uint32) error {
	h := v.h
	if v.err != nil {
		return fmt.Errorf("%s: copying a page for a view: %w", v.name, v.err)
	}
	f, off, name := h.f, int64(id)*int64(h.page), h.name
	if end := v.saved[id]; end != 0 {
		f, off, name = v.f, end-int64(h.page), v.name
	}
	if err := h.readPage(f, off, p, id, v.occ[id]); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func (v *hashView) get(keys []uint64, fn func(i int, row []byte)) error {
	h := v.h
	p := make([]byte, h.page)
	h.mu.RLock()
	defer h.mu.RUnlock()
	for i, k := range keys {
		id := v.dir[top(hashKey(k), v.depth)]
		if v.occ[id] == 0 {
			continue
		}
		if err := v.readPage(p, id); err != nil {
			return err
		}
		if s := h.find(p, v.occ[id], k); s >= 0 {
			fn(i, p[s*h.slot+12:(s+1)*h.slot])
		}
	}
	return nil
}

// scan calls fn with every row of the view, in no order.
func (v *hashView) scan(fn func(k uint64, row []byte)) error {
	h := v.h
	p := make([]byte, h.page)
	for id := range v.pages {
		occ := v.occ[id]
		if occ == 0 {
			continue
		}
		h.mu.RLock()
		err := v.readPage(p, id)
		h.mu.RUnlock()
		if err != nil {
			return err
		}
		for o := occ; o != 0; o &= o - 1 {
			s := mbits.TrailingZeros64(o)
			fn(binary.LittleEndian.Uint64(p[s*h.slot+4:]), p[s*h.slot+12:(s+1)*h.slot])
		}
	}
	return nil
}

func (v *hashView) release() {
	h := v.h
	h.mu.Lock()
	defer h.mu.Unlock()
	i := slices.Index(h.views, v)
	if i < 0 {
		return
	}
	h.views = slices.Delete(h.views, i, i+1)
	v.f.Close()
	_ = h.e.fs.Remove(v.name)
	h.e.bytes.Add(-v.size)
	if h.dropped && len(h.views) == 0 {
		_ = h.remove()
	}
}
