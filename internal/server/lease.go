package server

import (
	"slices"

	"github.com/paramserv/paramserv/internal/hugemem"
)

// Replies on the data path are written straight from the variables' value
// buffers, not from a copy: a pull lends each buffer it answers with (lend),
// and gives it back once the reply is written (release). A push that must
// update a buffer still lent updates a copy instead and makes it the
// variable's value (writable); the lent buffer stays as it was until its
// last reply is written, then becomes the variable's spare for the next
// such copy. With one worker, or pushes and pulls that do not overlap, no
// copy is ever made.
//
// Everything here runs with Server.mu held. Any code that writes a
// denseVar's value in place must call writable first.

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

// lease is a reply's hold on a variable's value buffer.
type lease struct {
	v   *denseVar
	buf []float32
}

// lend returns v's current values for a reply to write, which must call
// release when it has.
func (v *denseVar) lend() lease {
	v.lent.cur++
	return lease{v: v, buf: v.value}
}

// release gives back a buffer lent by lend.
func (l lease) release() {
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
func (v *denseVar) writable() {
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
