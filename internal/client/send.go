package client

import (
	"context"
	"time"

	"github.com/paramserv/paramserv/internal/wire"
)

// sent is what a request written on a data connection holds until its
// reply is read (recv) or the write failed: the stores of incremental
// pulls locked, the watch of the call's context and the health check.
type sent struct {
	held      *rowStore   // locked: an incremental pull of rows
	ds        *denseStore // locked: an incremental pull of dense values
	heldSince uint64      // ds's version before the pull
	stop      func() bool // stops the context's watch, if any
	armed     bool        // the health check is armed
}

// releaseSent gives back what the request in flight held (see sent).
func (d *dataConn) releaseSent() {
	s := &d.sent
	if s.armed && d.probe.disarm() {
		d.broken = true
	}
	if s.stop != nil && !s.stop() {
		d.broken = true // its deadline may be set in the past any time now
	}
	if s.ds != nil {
		s.ds.mu.Unlock()
	}
	if s.held != nil {
		s.held.mu.Unlock()
	}
	*s = sent{}
}

// send writes one request to ps i; recv reads its reply. noCache sends
// every key set's keys and keeps none. On an error the connection holds
// nothing (releaseSent has run).
func (dp *dataPath) send(ctx context.Context, d *dataConn, cs *callState, i int, push, pull bool, minStep int64, noCache bool) (err error) {
	defer func() {
		if err != nil {
			d.releaseSent()
		}
	}()
	c, req := dp.c, cs.req
	op := wire.OpPull
	if push {
		op = wire.OpPush
		if pull {
			op = wire.OpPushPull
		}
	}
	d.clock++
	// An older ps's error replies do not tell a cache miss from a
	// restore: it is asked to keep no key sets.
	sl := slotter{d: d, noCache: noCache || d.version < wire.DataVersionKinds}
	dp.growScratch(d, cs, i, push, pull)
	f := &d.frame
	f.Reset(wire.ReqHeaderLen)
	if push {
		dp.encodePush(d, cs, i, &sl)
	}
	incr := false
	if pull {
		incr = dp.encodePull(d, cs, i, push, &sl)
	}
	dincr := pull && dp.encodeDenseHeld(d, cs, i)
	var inc uint32 // the low bits of the incarnation the push was computed against
	if push && d.version >= wire.DataVersionIncarnation {
		inc = uint32(c.seen(i))
	}
	f.Request(wire.ReqHeader{Op: op, PullDense: pull && req.Params != nil, Incremental: incr, DenseIncremental: dincr, Worker: int32(c.opts.Worker), Step: req.Step, MinStep: minStep, Incarnation: inc})

	if err := d.setDeadline(ctx); err != nil {
		return err
	}
	if ctx.Done() != nil {
		d.sent.stop = context.AfterFunc(ctx, func() { _ = d.nc.SetDeadline(time.Unix(1, 0)) })
	}
	d.probe.arm(dp.c, i, d)
	d.sent.armed = true
	_, err = f.WriteTo(d.nc)
	return err
}

// slotter says how a request sends each key set (slotFor), remembering
// the slots the request has named so far.
type slotter struct {
	d       *dataConn
	noCache bool
	named   uint32 // slots named by this request
}

// slotFor says how to send key set e: by its slot if the ps keeps it,
// else its keys, kept in the least recently named slot.
func (sl *slotter) slotFor(e *keyEntry) (wire.KeyMode, int) {
	d := sl.d
	if sl.noCache || e.uid == 0 {
		return wire.KeysInline, wire.NoSlot
	}
	for s, u := range d.slot {
		if u == e.uid {
			sl.named |= 1 << s
			d.used[s] = d.clock
			return wire.KeysCached, s
		}
	}
	best := -1
	for s := range d.slot {
		if sl.named&(1<<s) == 0 && (best < 0 || d.used[s] < d.used[best]) {
			best = s
		}
	}
	if best < 0 {
		// Every slot is named by this request already (a request of more
		// than CacheSlots key sets): send the keys inline.
		return wire.KeysInline, wire.NoSlot
	}
	sl.named |= 1 << best
	d.slot[best], d.used[best] = e.uid, d.clock
	return wire.KeysInline, best
}

// growScratch makes d.scratch hold the rows gathered for ps i (several ps
// only), and, after the request is written, the rows it answers.
func (dp *dataPath) growScratch(d *dataConn, cs *callState, i int, push, pull bool) {
	c, req := dp.c, cs.req
	if len(dp.ps) == 1 {
		return
	}
	need := 0
	if push {
		for j, e := range cs.push {
			need += len(e.perPS[i]) * c.tableDim[req.SparseGrads[j].Table]
		}
	}
	if pull {
		for j, e := range cs.pull {
			need = max(need, len(e.perPS[i])*c.tableDim[req.SparseParams[j].Table])
		}
	}
	if cap(d.scratch) < need {
		d.scratch = make([]float32, need)
	}
}

// encodePush adds the push sections of ps i to the request: its part of
// every dense gradient, and its rows of every table's.
func (dp *dataPath) encodePush(d *dataConn, cs *callState, i int, sl *slotter) {
	c, req, f := dp.c, cs.req, &d.frame
	if req.Grads != nil {
		for _, p := range c.byPS[i] {
			f.Dense(p.Name, req.Grads[c.varOf[p.Name]][p.Offset:p.Offset+p.Len])
		}
	}
	off := 0
	for j, r := range req.SparseGrads {
		e := cs.push[j]
		keys, vals := e.keysOf(i), r.Values
		if len(dp.ps) > 1 {
			dim := c.tableDim[r.Table]
			vals = d.scratch[off : off+len(keys)*dim]
			for k, at := range e.pos[i] {
				copy(vals[k*dim:(k+1)*dim], r.Values[int(at)*dim:(int(at)+1)*dim])
			}
			off += len(vals)
		}
		mode, arg := sl.slotFor(e)
		f.SparsePush(r.Table, mode, arg, len(keys), keys, vals)
	}
}

// encodePull adds the sparse pull sections of ps i to the request, and
// reports whether they are incremental (the row store is then locked
// until the reply is read).
func (dp *dataPath) encodePull(d *dataConn, cs *callState, i int, push bool, sl *slotter) bool {
	c, req, f := dp.c, cs.req, &d.frame
	incr := d.incr && dp.held != nil && len(req.SparseParams) > 0
	var held *rowStore
	if incr {
		held = dp.held[i]
		// One incremental pull of this ps at a time: the rows it keeps
		// change only with whole answers.
		incr = held.want()
	}
	if incr {
		d.sent.held = held
		d.inc.ask(held, cs, i, c.tableDim)
	}
	for j, r := range req.SparseParams {
		e := cs.pull[j]
		keys := e.keysOf(i)
		mode, arg := wire.KeysAsPush, cs.asPush[j]
		if !push || arg < 0 {
			mode, arg = sl.slotFor(e)
		}
		if incr {
			f.SparsePullIncr(r.Table, mode, arg, len(keys), keys, held.inc, d.inc.since[j], d.inc.lack[j])
		} else {
			f.SparsePull(r.Table, mode, arg, len(keys), keys)
		}
	}
	return incr
}

// encodeDenseHeld adds what the worker holds of ps i's dense values to a
// pull, and reports whether the dense pull is incremental (the dense
// store is then locked until the reply is read).
func (dp *dataPath) encodeDenseHeld(d *dataConn, cs *callState, i int) bool {
	c := dp.c
	if !d.dincr || dp.dense == nil || cs.req.Params == nil || len(c.byPS[i]) == 0 {
		return false
	}
	ds := dp.dense[i]
	if !ds.want() {
		return false
	}
	d.sent.ds = ds
	d.frame.DenseHeld(wire.DenseHeld{Incarnation: ds.inc, Since: ds.since, Blocks: denseBlocks(c.byPS[i])})
	// Until a whole answer is in, the values kept are of no version.
	d.sent.heldSince = ds.since
	ds.since = 0
	return true
}

// setDeadline gives the connection ctx's deadline, or none.
func (d *dataConn) setDeadline(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dl, ok := ctx.Deadline()
	if !ok && !d.deadline {
		return nil
	}
	d.deadline = ok
	return d.nc.SetDeadline(dl)
}
