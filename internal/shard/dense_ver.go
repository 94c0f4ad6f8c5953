package shard

import (
	"math"

	"github.com/paramserv/paramserv/internal/format"
)

// Dense block versions, for incremental dense pulls (docs/WIRE.md): each
// variable is cut into blocks of format.DenseBlock values, each with the
// version of the shard's dense values at which it last may have changed.
// The shard's counter, dver, moves forward at every write of a variable's
// values; every writer goes through update (a push, a sync step's apply,
// an aggregate), which stamps the blocks the gradient may change, or
// installs a new state (Init, Restore, an import, a replicated copy),
// which stamps every block. A worker that holds the values of version
// since needs only the blocks of a version above it. Versions are the
// process's own: a replicated shard, whose copies count apart, refuses
// incremental pulls (internal/server).

// stamp marks the blocks of v that grad may change as changed now: call
// it before grad is applied to v's values. Every block, except under plain
// SGD, which leaves a value bit for bit as it was where its gradient is
// +0 (x - lr·(+0) is x, -0 included): a block whose gradient is all +0
// keeps its version. The check stops at a block's first other value, so
// it costs a scan only of the blocks it spares.
func (s *Shard) stamp(v *Var, grad []float32) {
	s.dver++
	if v.ver == nil {
		v.ver = make([]uint64, format.DenseBlocks(len(v.value)))
	}
	sgd := v.rule.Name() == "sgd" && len(grad) == len(v.value)
	for i := range v.ver {
		if sgd && allPlusZero(grad[i*format.DenseBlock:min((i+1)*format.DenseBlock, len(grad))]) {
			continue
		}
		v.ver[i] = s.dver
	}
}

// allPlusZero reports whether every value of g is +0 (bits 0).
func allPlusZero(g []float32) bool {
	for _, x := range g {
		if math.Float32bits(x) != 0 {
			return false
		}
	}
	return true
}

// stampAll marks every block of the state as changed now (a new state).
func (s *Shard) stampAll() {
	if s.st == nil {
		return
	}
	s.dver++
	for _, v := range s.st.order {
		if v.ver == nil {
			v.ver = make([]uint64, format.DenseBlocks(len(v.value)))
		}
		for i := range v.ver {
			v.ver[i] = s.dver
		}
	}
}

// DenseVersion is the version of the shard's dense values now: a worker
// that reads them all now holds them at this version.
func (s *Shard) DenseVersion() uint64 { return s.dver }

// DenseBlocks is the number of dense blocks of the shard's variables.
func (s *Shard) DenseBlocks() int {
	n := 0
	for _, v := range s.Vars() {
		n += format.DenseBlocks(len(v.value))
	}
	return n
}

// DenseChangedSince marks in sel (BitmapWords(DenseBlocks()) words,
// blocks numbered over Vars in order) the blocks that changed after
// version since (every block if since is 0) and returns how many.
func (s *Shard) DenseChangedSince(since uint64, sel []uint64) int {
	clear(sel)
	n, b := 0, 0
	for _, v := range s.Vars() {
		for i := range format.DenseBlocks(len(v.value)) {
			if since == 0 || v.ver == nil || v.ver[i] > since {
				sel[b>>6] |= 1 << (b & 63)
				n++
			}
			b++
		}
	}
	return n
}
