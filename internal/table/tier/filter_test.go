package tier

import "testing"

// The miss filter never forgets a key it took, and at the number of keys
// it was sized for says "maybe" to about 1% of the others.
func TestMissFilter(t *testing.T) {
	const n = 110000
	f := newMissFilter(n)
	for k := range uint64(n) {
		f.add(k * 7919)
	}
	for k := range uint64(n) {
		if !f.has(k * 7919) {
			t.Fatalf("key %d added, not found", k*7919)
		}
	}
	if f.full() {
		t.Errorf("full after %d keys of %d", f.adds, f.keys)
	}
	// Ten bits a key, not rounded up to a power of two (which made this
	// one 2^20 bits, and one for 110,000 keys twice that).
	if got, want := f.bytes(), int64(n*filterBitsPerKey/8+8); got > want {
		t.Errorf("filter of %d bytes for %d keys, want at most %d", got, n, want)
	}
	fp := 0
	for k := range uint64(n) {
		if f.has(k*7919 + 1) {
			fp++
		}
	}
	if rate := float64(fp) / n; rate > 0.02 {
		t.Errorf("false positives: %.4f of keys never added, want about 0.01", rate)
	}
	f.add(1)
	if !f.full() {
		t.Errorf("not full after %d keys of %d", f.adds, f.keys)
	}
}
