package server

import (
	"github.com/paramserv/paramserv/internal/consistency"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/wire"
)

// A large asynchronous dense push on the data path is applied while it
// arrives: each chunk of the gradient, right after it is read from the
// socket and checked (wire.DenseStream), updates the same chunk of the
// variable, while both are still in the core's cache. Reading the whole
// gradient first and updating after reads it back from memory, one pass
// of the variable's size more than the copy out of the socket; this is
// what made a 16 MiB push+pull take about 1.3 times the bare socket.
//
// A push must change nothing unless all of it is good, and the lock is not
// held while a worker sends, so the new values go into another buffer of
// the variable's size (its spare, lease.go) computed from the current
// values, which the fuser holds as a lease so that no other push changes
// them meanwhile (a push that must, updates a copy: writable). Once the
// request is read and checked, under the lock, the new buffer becomes the
// variable's value if the push is applied and no other push has updated
// the variable in between; otherwise the fused values are thrown away and
// the gradient, which is still whole in the request, is applied the usual
// way. Bit for bit, the result is the same as applyPush's.
//
// Only rules without state are fused (sgd): a stateful rule updates its
// state in place, which a rejected push must not. After a push that had to
// be thrown away because another one overlapped it, a variable is not
// fused again for fuseBackoff pushes, so busy variables (several workers
// pushing at once) go the usual way instead of doing the work twice.

// fuseMin is the fewest values for which a section is fused, and
// fuseBackoff the pushes of a variable not fused after a conflict.
const (
	fuseMin     = 64 << 10
	fuseBackoff = 64
)

// fuser is a data connection's fused push in progress.
type fuser struct {
	s    *Server
	rule optim.Rule
	vars []fusedVar // by dense section
	ok   bool       // every dense section so far is fused
}

// fusedVar is one dense section being applied as it arrives.
type fusedVar struct {
	v       *denseVar
	src     lease     // the values the new ones are computed from
	dst     []float32 // the new values; nil once installed
	updates int64     // v.updates when src was lent
	done    int64     // values computed so far
}

// DenseSection decides whether section i is fused: a push with dense
// sections only, asynchronous, a stateless rule, a known variable of n
// values, n large, no fuse of it in progress and no recent conflict.
func (f *fuser) DenseSection(h *wire.ReqHeader, i int, name []byte, n int64) {
	if i == 0 {
		f.ok = h.Op.Push() && h.SparsePush == 0 && h.Dense <= pipeMaxVars
	}
	if !f.ok || n < fuseMin {
		f.ok = false
		return
	}
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vars[string(name)]
	if !s.initialized || s.tracker.Config().Sync || s.rule.StateSlots() != 0 || !ok || int64(len(v.value)) != n || v.fusing {
		f.ok = false
		return
	}
	if v.fuseSkip > 0 {
		v.fuseSkip--
		f.ok = false
		return
	}
	v.fusing = true
	f.rule = s.rule
	dst := v.lent.spare
	v.lent.spare = nil
	if dst == nil {
		dst = make([]float32, n)
	}
	f.vars = append(f.vars, fusedVar{v: v, src: v.lend(), dst: dst, updates: v.updates})
}

// DenseChunk computes the new values of a chunk of section i.
func (f *fuser) DenseChunk(i int, off int64, vals []float32) {
	if !f.ok || i >= len(f.vars) {
		return
	}
	fv := &f.vars[i]
	if off != fv.done {
		f.ok = false
		return
	}
	end := off + int64(len(vals))
	dst := fv.dst[off:end]
	copy(dst, fv.src.buf[off:end])
	f.rule.Update(dst, vals, nil, fv.updates+1)
	fv.done = end
}

// ready reports whether the checked push dc.dense was fused whole and
// nothing changed its variables since. Call with mu held.
func (f *fuser) ready(s *Server, dc *dataConn) bool {
	if !f.ok || len(f.vars) == 0 || len(f.vars) != len(dc.dense) || s.tracker.Config().Sync {
		return false
	}
	for i, fv := range f.vars {
		v := fv.v
		if dc.dense[i].v != v || fv.done != int64(len(v.value)) {
			return false
		}
		if !sameBuf(v.value, fv.src.buf) || v.updates != fv.updates {
			v.fuseSkip = fuseBackoff // another push overlapped this one
			return false
		}
	}
	return true
}

// pushFused applies a push that ready approved, as applyPush would: the
// verdict, and on Apply the fused values in place of the variables'.
// Call with mu held.
func (s *Server) pushFused(dc *dataConn) (dropped bool, err error) {
	r := &dc.req
	verdict, err := s.applyPush(r.Worker, r.Step, nil, nil)
	if err != nil {
		return false, err
	}
	if verdict == consistency.Apply {
		s.fused++
		for i := range dc.fuse.vars {
			fv := &dc.fuse.vars[i]
			fv.v.updates++
			fv.v.install(fv.dst)
			fv.dst = nil
		}
	}
	return verdict.Dropped(), nil
}

// release ends the fused push: gives back the leases, keeps an unused new
// buffer as the variable's spare. Call with mu held.
func (f *fuser) release() {
	for i := range f.vars {
		fv := &f.vars[i]
		fv.src.release()
		if fv.dst != nil && fv.v.lent.spare == nil && len(fv.dst) == len(fv.v.value) {
			fv.v.lent.spare = fv.dst
		}
		fv.v.fusing = false
	}
	clear(f.vars)
	f.vars = f.vars[:0]
	f.ok = false
}
