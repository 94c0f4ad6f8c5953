package client

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/wire"
)

// Incremental dense pulls (Options.IncrementalPull, data path version 3,
// docs/WIRE.md): the worker keeps its own copy of the dense values it
// pulled from each ps (not the caller's buffers, which a caller may swap
// between calls), all of one version of the ps's dense values, since a
// dense pull reads every variable of the ps. A pull names that version;
// the ps answers the blocks (wire.DenseBlock values) changed since, and the
// worker fills in the rest from its copy, so the caller's buffers get bit
// for bit what a full pull gives.

// denseStore is what the worker keeps of one ps's dense values. mu is held
// for a whole incremental round trip; a pull that finds it held (another
// call's pull in flight) is a full one, without waiting.
type denseStore struct {
	mu    sync.Mutex
	inc   uint64 // the ps's incarnation the values are of
	since uint64 // the version held; 0: none
	vals  map[string][]float32

	incrSwitch // the same adaptive switch as rowStore's, counting blocks
}

func newDenseStore() *denseStore { return &denseStore{vals: make(map[string][]float32)} }

// want reports whether the next pull of this ps is to be incremental; if
// so the store is locked, to be unlocked by the caller once it is over.
// A full pull leaves the store without values (its since is 0).
func (s *denseStore) want() bool {
	if !s.mu.TryLock() {
		return false
	}
	if s.takeSkip() {
		s.since = 0 // the full pull's values are not kept
		s.mu.Unlock()
		return false
	}
	return true
}

// blocks is the number of dense blocks of parts.
func denseBlocks(parts []placement.Part) int {
	n := 0
	for _, p := range parts {
		n += wire.DenseBlocks(p.Len)
	}
	return n
}

// denseAnswer reads the head of the reply to an incremental dense pull:
// the version and the bitmap of the blocks that come.
type denseAnswer struct {
	ver   uint64
	sel   []uint64
	first int // the block number of the next section
	sent  int // blocks sent
}

// errBlockCount: the ps holds another number of dense blocks than the
// worker counts, so other variables (a LayoutError).
var errBlockCount = errors.New("another layout")

func (a *denseAnswer) head(body *wire.BodyReader, blocks int) error {
	ver, err := body.Uint64("dense version")
	if err != nil {
		return err
	}
	nb, err := body.Uint32("dense block count")
	if err != nil {
		return err
	}
	if a.sel, err = body.Keys(a.sel[:0], int64(wire.BitmapWords(int(nb))), "dense block bitmap"); err != nil {
		return err
	}
	if nb != int64(blocks) {
		return fmt.Errorf("%w: the ps answered %d dense blocks of %d values, the worker counts %d", errBlockCount, nb, wire.DenseBlock, blocks)
	}
	a.ver, a.first, a.sent = ver, 0, 0
	for _, w := range a.sel {
		a.sent += bits.OnesCount64(w)
	}
	return nil
}

// count is the number of values a section of n values carries.
func (a *denseAnswer) count(n int) int {
	c := 0
	for b := range wire.DenseBlocks(n) {
		if wire.BitSet(a.sel, a.first+b) {
			c += min((b+1)*wire.DenseBlock, n) - b*wire.DenseBlock
		}
	}
	return c
}

// read reads the section of variable part name into dst: the blocks sent
// from the body (kept in s), the others from s.
func (a *denseAnswer) read(s *denseStore, name string, dst []float32, body *wire.BodyReader) error {
	keep := s.vals[name]
	if len(keep) != len(dst) {
		keep = make([]float32, len(dst))
		s.vals[name] = keep
	}
	nb := wire.DenseBlocks(len(dst))
	for b := range nb {
		lo, hi := b*wire.DenseBlock, min((b+1)*wire.DenseBlock, len(dst))
		if wire.BitSet(a.sel, a.first+b) {
			if err := body.FloatsInto(dst[lo:hi], "values"); err != nil {
				return err
			}
			copy(keep[lo:hi], dst[lo:hi])
			continue
		}
		copy(dst[lo:hi], keep[lo:hi])
	}
	a.first += nb
	return nil
}
