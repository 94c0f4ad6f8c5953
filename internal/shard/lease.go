package shard

import (
	"slices"

	"github.com/paramserv/paramserv/internal/hugemem"
)

// Replies on the data path are written straight from the variables' value
// buffers, not from a copy: a pull lends each buffer it answers with (LeaseValues),
// and gives it back once the reply is written (Release). A push that must
// update a buffer still lent updates a copy instead and makes it the
// variable's value (writable); the lent buffer stays as it was until its
// last reply is written, then becomes the variable's spare for the next
// such copy. With one worker, or pushes and pulls that do not overlap, no
// copy is ever made.
//
// Like every method of a Shard, LeaseValues and Release run serialised with the
// shard's other calls (under the ps's lock); only the lent buffer's bytes
// are read outside it. Any code that writes a Var's value in place must
// call writable first.

// lentBufs is the lending state of one variable.
type lentBufs struct {
	cur   int       // replies in flight reading the current value buffer
	old   []oldBuf  // earlier value buffers still read by replies
	spare []float32 // a free buffer of the variable's size, or nil
}

// oldBuf is a former value buffer and the replies still reading it.
type oldBuf struct {
	buf     []float32
	readers int
}

// Lease is a reply's hold on a variable's value buffer.
type Lease struct {
	v   *Var
	buf []float32
}

// Var is the variable lent.
func (l Lease) Var() *Var { return l.v }

// Values are the lent values: unchanged until Release.
func (l Lease) Values() []float32 { return l.buf }

// LeaseValues returns v's current values for a reply to write, which must call
// Release when it has.
func (v *Var) LeaseValues() Lease {
	v.lent.cur++
	return Lease{v: v, buf: v.value}
}

// Release gives back a buffer lent by LeaseValues.
func (l Lease) Release() {
	lb := &l.v.lent
	if sameBuf(l.buf, l.v.value) {
		lb.cur--
		return
	}
	for i := range lb.old {
		o := &lb.old[i]
		if !sameBuf(o.buf, l.buf) {
			continue
		}
		if o.readers--; o.readers == 0 {
			if lb.spare == nil && len(o.buf) == len(l.v.value) {
				lb.spare = o.buf
			}
			lb.old = slices.Delete(lb.old, i, i+1)
		}
		return
	}
}

// writable makes v.value safe to write in place: if replies in flight still
// read it, v.value becomes a copy in another buffer.
func (v *Var) writable() {
	lb := &v.lent
	if lb.cur == 0 {
		return
	}
	nb := lb.spare
	lb.spare = nil
	if nb == nil {
		nb = hugemem.Float32s(len(v.value))
	}
	copy(nb, v.value)
	lb.old = append(lb.old, oldBuf{buf: v.value, readers: lb.cur})
	v.value, lb.cur = nb, 0
}

func sameBuf(a, b []float32) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
