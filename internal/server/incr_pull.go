package server

import (
	"github.com/paramserv/paramserv/internal/wire"
)

// Incremental pulls (docs/WIRE.md): a pull section names the version of
// the rows the worker holds and the keys whose rows it lacks; the reply
// carries the table's version, a bitmap of the rows that come (those
// changed since, and those lacked) and their values, or every row without a
// bitmap when all come.

// sizeSel gives dc.sel room for the bitmaps of every pull section of the
// request, allocated before any is made: the reply's payloads are views of
// it.
func (dc *dataConn) sizeSel() {
	n := 0
	for i := range dc.req.SparsePull {
		n += wire.BitmapWords(dc.pullSets[i].set.Len())
	}
	if cap(dc.sel) < n {
		dc.sel = make([]uint64, n)
	}
	dc.sel = dc.sel[:0]
}

// pullIncr answers pull section i incrementally: reads its rows into dst
// as a full pull would, compacts those to send to the front of dst, and
// adds the reply's section. It returns the values sent. Call with mu held.
func (s *Server) pullIncr(dc *dataConn, i, dim int, owned bool, dst []float32) (int, error) {
	sec := &dc.req.SparsePull[i]
	set := dc.pullSets[i].set
	nk := set.Len()
	at := len(dc.sel)
	sel := dc.sel[at : at+wire.BitmapWords(nk)]
	dc.sel = dc.sel[:at+len(sel)]
	since := sec.Since
	if sec.Incarnation != s.shard.Incarnation() {
		since = 0 // versions of another incarnation mean nothing here
	}
	n, ver, err := s.shard.PullRowsSince(sec.Table, set, owned, dst, since, sec.Lack, sel)
	if err != nil {
		return 0, err
	}
	if n == nk {
		dc.reply.SparseValuesIncr(ver, dst, nil)
		return len(dst), nil
	}
	// Move the rows that go to the front, in key order.
	w := 0
	for k := range nk {
		if sel[k>>6]&(1<<(k&63)) == 0 {
			continue
		}
		if w != k {
			copy(dst[w*dim:(w+1)*dim], dst[k*dim:(k+1)*dim])
		}
		w++
	}
	dc.reply.SparseValuesIncr(ver, dst[:w*dim], sel)
	return w * dim, nil
}

// pullDenseIncr adds the dense part of the reply to an incremental dense
// pull: the version of the ps's dense values, the bitmap of the blocks
// that come (those changed since the version the worker holds, every one
// if it holds none or holds another incarnation's), then each variable's
// section with the values of its blocks that come, lent as a full pull's.
// It returns the bytes of values sent. A pull that counts other blocks
// than the ps holds comes from a worker of another layout: it gets every
// block and the ps's count, and the worker reports the layout error, as
// it does when a full pull answers other variables. Call with mu held.
func (s *Server) pullDenseIncr(dc *dataConn) (int, error) {
	held := dc.req.DenseHeld
	nb := s.shard.DenseBlocks()
	since := held.Since
	if held.Incarnation != s.shard.Incarnation() || held.Blocks != nb {
		since = 0 // versions of another incarnation (or layout) mean nothing here
	}
	words := wire.BitmapWords(nb)
	if cap(dc.dsel) < words {
		dc.dsel = make([]uint64, words)
	}
	sel := dc.dsel[:words]
	s.shard.DenseChangedSince(since, sel)
	dc.reply.DenseIncrHead(s.shard.DenseVersion(), nb, sel)
	dense, first := 0, 0
	for _, v := range s.shard.Vars() {
		l := v.LeaseValues()
		dc.leases = append(dc.leases, l)
		dense += 4 * dc.reply.DenseBlocksOf(v.Name(), l.Values(), sel, first)
		first += wire.DenseBlocks(v.Len())
	}
	return dense, nil
}
