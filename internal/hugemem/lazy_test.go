package hugemem

import "testing"

func TestLazy(t *testing.T) {
	for _, n := range []int{0, 1, 1000, MinBytes/8 - 1, MinBytes / 8, 3<<20 + 5} {
		b := Lazy[uint64](n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Lazy(%d): len %d cap %d", n, len(b), cap(b))
		}
		for i, x := range b {
			if x != 0 {
				t.Fatalf("Lazy(%d)[%d] = %v, want 0", n, i, x)
			}
		}
	}
}

func TestGrowLazy(t *testing.T) {
	var b []uint32
	grows := 0
	for i := range 3 << 20 {
		if len(b) == cap(b) {
			grows++
		}
		b = GrowLazy(b, 1)
		if len(b) != i || cap(b) <= i {
			t.Fatalf("GrowLazy at %d: len %d cap %d", i, len(b), cap(b))
		}
		if x := b[:i+1][i]; x != 0 {
			t.Fatalf("GrowLazy left %d past the end", x)
		}
		b = append(b, uint32(i))
	}
	for i, x := range b {
		if x != uint32(i) {
			t.Fatalf("b[%d] = %v after growing", i, x)
		}
	}
	if grows > 80 {
		t.Errorf("%d reallocations for %d appends: not growing geometrically", grows, len(b))
	}
	same := GrowLazy(b[:10], 5)
	if &same[:1][0] != &b[0] {
		t.Error("GrowLazy reallocated a slice with room to spare")
	}
}
