package shard

import "testing"

// A lent buffer is never written: an update while it is lent goes to a
// copy, and the lent buffer becomes the spare once its last reply is out.
func TestLendWritableRelease(t *testing.T) {
	v := &Var{name: "w", value: []float32{1, 2, 3}}
	a := v.LeaseValues()
	b := v.LeaseValues()
	v.writable()
	if sameBuf(v.value, a.buf) {
		t.Fatal("writable kept the lent buffer")
	}
	v.value[0] = 99 // as an update would
	if a.buf[0] != 1 || b.buf[0] != 1 {
		t.Fatalf("a lent buffer changed: %v", a.buf)
	}
	c := v.LeaseValues() // lends the new buffer
	a.Release()
	if v.lent.spare != nil {
		t.Fatal("the old buffer became spare while a reply still reads it")
	}
	b.Release()
	if !sameBuf(v.lent.spare, a.buf) || len(v.lent.old) != 0 {
		t.Fatalf("after the last release: spare %p, %d old", v.lent.spare, len(v.lent.old))
	}
	v.writable() // c still reads the current buffer: the spare takes over
	if !sameBuf(v.value, a.buf) || v.value[0] != 99 || c.buf[0] != 99 {
		t.Fatalf("second copy: value %v, lent %v", v.value, c.buf)
	}
	c.Release()
	v.writable() // nothing lent: in place
	if !sameBuf(v.value, a.buf) || v.lent.cur != 0 {
		t.Fatal("writable copied a buffer nobody reads")
	}
}
