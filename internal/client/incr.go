package client

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/paramserv/paramserv/internal/mix"
	"github.com/paramserv/paramserv/internal/wire"
)

// Incremental pulls (Options.IncrementalPull, docs/WIRE.md): the worker
// keeps, per ps and table, the rows it pulled and the version of the ps's
// table they are of. A pull section names one version, the oldest among
// the rows it holds of the section's keys, and marks the keys it holds no
// row of; the ps answers the rows changed since that version and the
// lacking ones, and the worker fills in the rest from what it keeps. Every
// key of the section then holds the answer's version: a row the ps did not
// send was unchanged up to it. The result is bit for bit a full pull's.

// MaxHeldRows bounds the rows kept per table and ps; keys past it are
// pulled in full every time.
const MaxHeldRows = 1 << 22

// rowStore is what the worker keeps of one ps's rows. mu is held for a
// whole incremental round trip to the ps, so the rows change only with
// whole answers.
type rowStore struct {
	mu     sync.Mutex
	inc    uint64 // the ps's incarnation the versions are of; 0: none
	tables map[string]*heldTable

	// When nearly every row asked for comes anyway (a worker pushes every
	// row it pulls, and most optimizers change every row they update),
	// asking costs and saves nothing.
	incrSwitch
}

// incrSwitch is the adaptive switch of a store of what the worker keeps:
// after a window of pulls that sent at least wastedNum/wastedDen of what
// they asked for (rows, or dense blocks), the next skip pulls are full
// ones, skip doubling (up to maxSkip) while that lasts. Guarded by the
// store's mu.
type incrSwitch struct {
	asked, sent, pulls int
	skip, backoff      int
}

// takeSkip reports whether this pull is one of the full ones to make,
// and counts it.
func (b *incrSwitch) takeSkip() bool {
	if b.skip > 0 {
		b.skip--
		return true
	}
	return false
}

// tally counts an answered incremental pull: what it asked for and what
// came.
func (b *incrSwitch) tally(asked, sent int) {
	b.asked += asked
	b.sent += sent
	b.pulls++
	if b.pulls < incrWindow {
		return
	}
	if b.sent*wastedDen >= b.asked*wastedNum && !alwaysIncremental {
		b.backoff = min(max(2*b.backoff, incrWindow), maxSkip)
		b.skip = b.backoff
	} else {
		b.backoff = 0
	}
	b.asked, b.sent, b.pulls = 0, 0, 0
}

// The adaptive switch: windows of incrWindow pulls; a window that sent
// at least wastedNum/wastedDen of the rows asked for turns incremental
// pulls off for the next backoff pulls (8, doubling up to maxSkip).
// alwaysIncremental turns the switch off (tests).
var alwaysIncremental = false

const (
	incrWindow           = 8
	wastedNum, wastedDen = 9, 10
	maxSkip              = 256
)

// want reports whether the next pull of this ps is to be incremental; if
// so the store is locked, to be unlocked by the caller once it is over.
func (s *rowStore) want() bool {
	s.mu.Lock()
	if s.takeSkip() {
		s.mu.Unlock()
		return false
	}
	return true
}

// heldTable is the rows kept of one table: row i, of key find(k) == i,
// is vals[i*dim:(i+1)*dim], of version ver[i]. The index is open
// addressing with linear probing, at most half full (a Go map cost twice
// as much here: a pull looks up every key).
type heldTable struct {
	dim   int
	index []heldSlot // power-of-two length
	ver   []uint64
	vals  []float32
}

// heldSlot is an index entry: key, and 1 + its row (0: empty).
type heldSlot struct {
	key uint64
	row int32
}

// find returns the row of key, or -1.
func (t *heldTable) find(key uint64) int32 {
	if len(t.index) == 0 {
		return -1
	}
	mask := uint64(len(t.index) - 1)
	for p := mix.Murmur3(key) & mask; ; p = (p + 1) & mask {
		sl := &t.index[p]
		if sl.row == 0 {
			return -1
		}
		if sl.key == key {
			return sl.row - 1
		}
	}
}

// add gives key a new row holding vals and returns it (key must not have
// one).
func (t *heldTable) add(key uint64, vals []float32) int32 {
	r := int32(len(t.ver))
	t.ver = append(t.ver, 0)
	t.vals = append(t.vals, vals...)
	if 2*len(t.ver) > len(t.index) {
		old := t.index
		t.index = make([]heldSlot, max(1024, 2*len(old)))
		for _, sl := range old {
			if sl.row != 0 {
				t.put(sl)
			}
		}
	}
	t.put(heldSlot{key: key, row: r + 1})
	return r
}

func (t *heldTable) put(sl heldSlot) {
	mask := uint64(len(t.index) - 1)
	p := mix.Murmur3(sl.key) & mask
	for t.index[p].row != 0 && t.index[p].key != sl.key {
		p = (p + 1) & mask
	}
	t.index[p] = sl
}

func newRowStore() *rowStore { return &rowStore{tables: make(map[string]*heldTable)} }

func (s *rowStore) table(name string, dim int) *heldTable {
	t := s.tables[name]
	if t == nil {
		t = &heldTable{dim: dim}
		s.tables[name] = t
	}
	return t
}

// incrScratch is a connection's per-request state of an incremental pull,
// per pull section: the row each key holds (-1: none), the version named,
// the lack bitmap, and the reply's bitmap and values.
type incrScratch struct {
	idx   [][]int32
	since []uint64
	lack  [][]uint64
	sel   []uint64
	vals  []float32
}

// ask fills the request's per-section state for ps i from s.
func (x *incrScratch) ask(s *rowStore, cs *callState, i int, dims map[string]int) {
	req := cs.req
	n := len(req.SparseParams)
	for len(x.idx) < n {
		x.idx, x.lack = append(x.idx, nil), append(x.lack, nil)
	}
	x.since = x.since[:0]
	for j, r := range req.SparseParams {
		keys := cs.pull[j].keysOf(i)
		t := s.table(r.Table, dims[r.Table])
		idx := x.idx[j][:0]
		lack := x.lack[j][:0]
		lack = append(lack, make([]uint64, wire.BitmapWords(len(keys)))...)
		since := uint64(0)
		held := 0
		for k, key := range keys {
			at := t.find(key)
			if at < 0 || s.inc == 0 {
				idx = append(idx, -1)
				lack[k>>6] |= 1 << (k & 63)
				continue
			}
			idx = append(idx, at)
			if v := t.ver[at]; held == 0 || v < since {
				since = v
			}
			held++
		}
		if held == 0 {
			since = 0
		}
		x.idx[j], x.lack[j] = idx, lack
		x.since = append(x.since, since)
	}
}

// answer reads the reply's sparse sections (after its dense ones) into the
// caller's rows and s. inc is the reply's incarnation.
func (x *incrScratch) answer(s *rowStore, cs *callState, i int, dims map[string]int, inc uint64, body *wire.BodyReader) error {
	req := cs.req
	if inc != s.inc {
		// Another ps (restarted or restored): what is kept is of no use,
		// and the ps answered every row (the request named s.inc).
		clear(s.tables)
		s.inc = inc
		for j := range req.SparseParams {
			for k := range x.idx[j] {
				x.idx[j][k] = -1
			}
		}
	}
	asked, sent := 0, 0
	for j, r := range req.SparseParams {
		e := cs.pull[j]
		keys := e.keysOf(i)
		nk := len(keys)
		dim := dims[r.Table]
		asked += nk
		ver, err := body.Uint64("version")
		if err != nil {
			return err
		}
		cnt, err := body.Uint32("value count")
		if err != nil {
			return err
		}
		all := cnt == int64(nk*dim)
		sent += int(cnt) / max(1, dim)
		x.sel = x.sel[:0]
		if !all {
			if x.sel, err = body.Keys(x.sel, int64(wire.BitmapWords(nk)), "row bitmap"); err != nil {
				return err
			}
			n := 0
			for _, w := range x.sel {
				n += bits.OnesCount64(w)
			}
			if int64(n*dim) != cnt {
				return fmt.Errorf("table %q: the ps sent %d values for %d rows of dim %d", r.Table, cnt, n, dim)
			}
		}
		if cap(x.vals) < int(cnt) {
			x.vals = make([]float32, cnt)
		}
		vals := x.vals[:cnt]
		if err := body.FloatsInto(vals, "rows"); err != nil {
			return err
		}
		t := s.table(r.Table, dim)
		idx := x.idx[j]
		if !all {
			for k := range nk {
				if x.sel[k>>6]&(1<<(k&63)) == 0 && idx[k] < 0 {
					return fmt.Errorf("table %q: the ps left out the row of key %d, which the worker does not hold", r.Table, keys[k])
				}
			}
		}
		w := 0
		for k, key := range keys {
			at := k
			if e.perPS != nil {
				at = int(e.pos[i][k])
			}
			dst := r.Values[at*dim : (at+1)*dim]
			h := idx[k]
			if all || x.sel[k>>6]&(1<<(k&63)) != 0 {
				src := vals[w*dim : (w+1)*dim]
				w++
				copy(dst, src)
				if h < 0 {
					if len(t.ver) >= MaxHeldRows {
						continue
					}
					if h = t.find(key); h < 0 { // not a key repeated in the section
						h = t.add(key, src)
					}
				}
				copy(t.vals[int(h)*dim:(int(h)+1)*dim], src)
				t.ver[h] = ver
				continue
			}
			copy(dst, t.vals[int(h)*dim:(int(h)+1)*dim])
			t.ver[h] = ver // unchanged up to the answer's version
		}
	}
	s.tally(asked, sent)
	return nil
}
