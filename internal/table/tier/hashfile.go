package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The hash store: a table's rows on disk in a file of fixed-size pages,
// each holding up to a page's worth of fixed-size slots (key, row), found
// by the key's hash through a directory in memory (extendible hashing: the
// directory has 2^depth entries, indexed by the top depth bits of the
// hash; a page that overflows splits in two by the next bit, and the
// directory doubles when a page's depth passes its own). A lookup is one
// read of one page (pread through the page cache, not a mapping: the
// process's resident memory stays the budget's), a batch of changes one
// read and one write of each page it touches. Nothing is rewritten in the
// background: there are no compactions.
//
// Each page carries a CRC-32C of its bytes, checked at every read: a
// damaged page fails the read (ErrStore).
//
// A view (a consistent cut, for checkpoints, while writes go on) keeps a
// copy of the directory; a write to a page a live view can see first
// copies the page's old bytes to the view's own file (copy on write). Pages
// are never freed or moved, so the view reads a page from its file when it
// was copied and from the table's file otherwise.
//
// The store is memory that spills (see OpenStore): nothing is synced, and
// a crash leaves nothing to recover.

const (
	hashPageBytes  = 4096
	hashPageHeader = 8 // CRC-32C (4), slot count (2), local depth (1), spare (1)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

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
// bytes.
func (e *hashEngine) open(prefix uint32, rowLen int) (*hashFile, error) {
	slot := 8 + rowLen
	page := hashPageBytes
	for (page-hashPageHeader)/slot < 16 {
		page += hashPageBytes
	}
	h := &hashFile{
		e: e, name: e.fs.PathJoin(e.dir, fmt.Sprintf("table-%d.hash", prefix)),
		rowLen: rowLen, slot: slot, page: page, cap: min((page-hashPageHeader)/slot, 1<<16-1),
		dir: []uint32{0},
	}
	f, err := createRW(e.fs, h.name)
	if err != nil {
		return nil, err
	}
	h.f = f
	h.cur, h.old = make([]byte, page), make([]byte, page)
	// Page 0, empty, is the whole table's.
	h.seal(h.cur, 0, 0)
	if _, err := f.WriteAt(h.cur, 0); err != nil {
		f.Close()
		return nil, e.fail(err)
	}
	h.pages = 1
	e.bytes.Add(int64(page))
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
// (the Table's flight, or Load), so cur and old, the writer's buffers,
// need no more.
type hashFile struct {
	e      *hashEngine
	name   string
	rowLen int
	slot   int // bytes per slot: key then row
	page   int // bytes per page
	cap    int // slots per page

	mu      sync.RWMutex
	f       vfs.File
	depth   uint     // the directory's
	dir     []uint32 // the page of each hash prefix of depth bits
	pages   uint32   // pages in the file
	views   []*hashView
	dropped bool // the table's rows are gone; the file goes with the last view

	cur, old []byte
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

// seal writes a page's header: n slots, local depth d, and the CRC.
func (h *hashFile) seal(p []byte, n int, d uint) {
	binary.LittleEndian.PutUint16(p[4:], uint16(n))
	p[6], p[7] = byte(d), 0
	binary.LittleEndian.PutUint32(p, crc32.Checksum(p[4:], castagnoli))
}

var errDamaged = errors.New("damaged page")

// check verifies a page read from file name at page id: its slot count
// and local depth.
func (h *hashFile) check(p []byte, id uint32) (n int, d uint, err error) {
	if binary.LittleEndian.Uint32(p) != crc32.Checksum(p[4:], castagnoli) {
		return 0, 0, fmt.Errorf("%s: page %d: %w (checksum)", h.name, id, errDamaged)
	}
	n, d = int(binary.LittleEndian.Uint16(p[4:])), uint(p[6])
	if n > h.cap || d > 64 {
		return 0, 0, fmt.Errorf("%s: page %d: %w (%d slots, depth %d)", h.name, id, errDamaged, n, d)
	}
	return n, d, nil
}

// readPage reads page id of f into p and checks it.
func (h *hashFile) readPage(f vfs.File, off int64, p []byte, id uint32) (int, uint, error) {
	if _, err := f.ReadAt(p, off); err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, fmt.Errorf("%s: reading page %d: %w", h.name, id, err)
	}
	return h.check(p, id)
}

// find is the slot of key k among a page's n, or -1.
func (h *hashFile) find(p []byte, n int, k uint64) int {
	for i, off := 0, hashPageHeader; i < n; i, off = i+1, off+h.slot {
		if binary.LittleEndian.Uint64(p[off:]) == k {
			return i
		}
	}
	return -1
}

// get calls fn(i, row) for each of keys found (row only valid during fn).
func (h *hashFile) get(keys []uint64, fn func(i int, row []byte)) error {
	if err := h.e.Err(); err != nil {
		return err
	}
	p := make([]byte, h.page)
	h.mu.RLock()
	defer h.mu.RUnlock()
	for i, k := range keys {
		id := h.dir[top(hashKey(k), h.depth)]
		n, _, err := h.readPage(h.f, int64(id)*int64(h.page), p, id)
		if err != nil {
			return err
		}
		if s := h.find(p, n, k); s >= 0 {
			off := hashPageHeader + s*h.slot + 8
			fn(i, p[off:off+h.rowLen])
		}
	}
	return nil
}

// write applies changes (a row, or a deletion where row is nil), a page
// at a time.
func (h *hashFile) write(ch []change) error {
	if err := h.e.Err(); err != nil {
		return err
	}
	hs := make([]uint64, len(ch))
	order := make([]int32, len(ch))
	for i := range ch {
		hs[i], order[i] = hashKey(ch[i].key), int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		switch {
		case hs[a] < hs[b]:
			return -1
		case hs[a] > hs[b]:
			return 1
		}
		return 0
	})
	for i := 0; i < len(order); {
		j, err := h.writePage(ch, hs, order[i:])
		if err != nil {
			return h.e.fail(fmt.Errorf("%s: %w", h.name, err))
		}
		i += j
	}
	return nil
}

// writePage applies the changes at the head of order (by hash) that fall
// in the page of the first, and returns how many it applied.
func (h *hashFile) writePage(ch []change, hs []uint64, order []int32) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.dir[top(hs[order[0]], h.depth)]
	off := int64(id) * int64(h.page)
	n, d, err := h.readPage(h.f, off, h.old, id)
	if err != nil {
		return 0, err
	}
	copy(h.cur, h.old)
	pre := top(hs[order[0]], d)
	var extra []byte // slots past the page's room
	m := 0
	for ; m < len(order) && top(hs[order[m]], d) == pre; m++ {
		c := &ch[order[m]]
		s := h.find(h.cur, n, c.key)
		switch {
		case c.row == nil && s >= 0: // delete: the last slot takes its place
			n--
			copy(h.cur[hashPageHeader+s*h.slot:], h.cur[hashPageHeader+n*h.slot:hashPageHeader+(n+1)*h.slot])
		case c.row == nil:
			if x := findExtra(extra, h.slot, c.key); x >= 0 {
				extra = slices.Delete(extra, x, x+h.slot)
			}
		case s >= 0:
			copy(h.cur[hashPageHeader+s*h.slot+8:], c.row)
		case n < h.cap && len(extra) == 0:
			o := hashPageHeader + n*h.slot
			binary.LittleEndian.PutUint64(h.cur[o:], c.key)
			copy(h.cur[o+8:o+h.slot], c.row)
			n++
		default:
			if x := findExtra(extra, h.slot, c.key); x >= 0 {
				copy(extra[x+8:x+h.slot], c.row)
				break
			}
			extra = binary.LittleEndian.AppendUint64(extra, c.key)
			extra = append(extra, c.row...)
		}
	}
	h.saveForViews(id)
	if len(extra) == 0 {
		h.seal(h.cur, n, d)
		_, err := h.f.WriteAt(h.cur, off)
		return m, err
	}
	// Split: every slot, the page's and the extra, into pages of depth
	// d+1 and more until each fits.
	all := append(slices.Clone(h.cur[hashPageHeader:hashPageHeader+n*h.slot]), extra...)
	return m, h.place(all, id, pre, d)
}

func findExtra(extra []byte, slot int, k uint64) int {
	for x := 0; x < len(extra); x += slot {
		if binary.LittleEndian.Uint64(extra[x:]) == k {
			return x
		}
	}
	return -1
}

// place writes slots, whose hashes share the prefix pre of d bits, into
// page id (and new pages), splitting by the next bits until each fits.
func (h *hashFile) place(slots []byte, id uint32, pre uint64, d uint) error {
	if len(slots)/h.slot <= h.cap {
		p := h.cur
		clear(p)
		copy(p[hashPageHeader:], slots)
		h.seal(p, len(slots)/h.slot, d)
		_, err := h.f.WriteAt(p, int64(id)*int64(h.page))
		return err
	}
	if d == 64 {
		return fmt.Errorf("%d rows with one hash", len(slots)/h.slot)
	}
	var lo, hi []byte
	for x := 0; x < len(slots); x += h.slot {
		if top(hashKey(binary.LittleEndian.Uint64(slots[x:])), d+1)&1 == 0 {
			lo = append(lo, slots[x:x+h.slot]...)
		} else {
			hi = append(hi, slots[x:x+h.slot]...)
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
	h.e.bytes.Add(int64(h.page))
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

// saveForViews copies page id's old bytes (h.old) to the file of every
// live view that sees it and has no copy yet. Called with mu held.
func (h *hashFile) saveForViews(id uint32) {
	for _, v := range h.views {
		if id >= v.pages || v.saved[id] != 0 {
			continue
		}
		if v.err == nil {
			if _, err := v.f.WriteAt(h.old, v.size); err != nil {
				v.err = err
				continue
			}
		}
		v.size += int64(h.page)
		h.e.bytes.Add(int64(h.page))
		v.saved[id] = v.size // the copy's end: 0 means none
	}
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
	v := &hashView{h: h, f: f, name: name, depth: h.depth, dir: slices.Clone(h.dir), pages: h.pages, saved: make(map[uint32]int64)}
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
	pages uint32
	// Guarded by h.mu.
	saved map[uint32]int64 // page → the end of its copy in f
	size  int64
	err   error // a copy that failed: the view cannot be read
}

// readPage reads page id as the view sees it. Called with h.mu held (read).
func (v *hashView) readPage(p []byte, id uint32) (int, error) {
	h := v.h
	if v.err != nil {
		return 0, fmt.Errorf("%s: copying page for a view: %w", v.name, v.err)
	}
	f, off := h.f, int64(id)*int64(h.page)
	if end := v.saved[id]; end != 0 {
		f, off = v.f, end-int64(h.page)
	}
	n, _, err := h.readPage(f, off, p, id)
	return n, err
}

func (v *hashView) get(keys []uint64, fn func(i int, row []byte)) error {
	h := v.h
	p := make([]byte, h.page)
	h.mu.RLock()
	defer h.mu.RUnlock()
	for i, k := range keys {
		n, err := v.readPage(p, v.dir[top(hashKey(k), v.depth)])
		if err != nil {
			return err
		}
		if s := h.find(p, n, k); s >= 0 {
			off := hashPageHeader + s*h.slot + 8
			fn(i, p[off:off+h.rowLen])
		}
	}
	return nil
}

// scan calls fn with every row of the view, in no order.
func (v *hashView) scan(fn func(k uint64, row []byte)) error {
	h := v.h
	p := make([]byte, h.page)
	for id := range v.pages {
		h.mu.RLock()
		n, err := v.readPage(p, id)
		h.mu.RUnlock()
		if err != nil {
			return err
		}
		for s, off := 0, hashPageHeader; s < n; s, off = s+1, off+h.slot {
			fn(binary.LittleEndian.Uint64(p[off:]), p[off+8:off+h.slot])
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
