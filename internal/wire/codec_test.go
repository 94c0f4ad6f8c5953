package wire

import (
	"encoding/binary"
	"math"
	"testing"
)

func TestFloat32RoundTrip(t *testing.T) {
	in := []float32{0, -0, 1.5, float32(math.Inf(-1)), math.Float32frombits(0x7fc00001), 3e-42}
	b := Float32Bytes(in)
	for i, v := range in {
		if got := binary.LittleEndian.Uint32(b[4*i:]); got != math.Float32bits(v) {
			t.Fatalf("element %d: bytes %08x, want %08x", i, got, math.Float32bits(v))
		}
	}
	// Misaligned input takes the copying path and must agree bit for bit.
	buf := make([]byte, len(b)+1)
	copy(buf[1:], b)
	for _, src := range [][]byte{b, buf[1:]} {
		out, err := Float32s(src)
		if err != nil {
			t.Fatal(err)
		}
		for i := range in {
			if math.Float32bits(out[i]) != math.Float32bits(in[i]) {
				t.Fatalf("element %d: got %v want %v", i, out[i], in[i])
			}
		}
	}
	if _, err := Float32s(make([]byte, 7)); err == nil {
		t.Fatal("7 bytes accepted as float32 values")
	}
}

func TestUint64RoundTrip(t *testing.T) {
	in := []uint64{0, 1, math.MaxUint64, 1 << 40}
	b := Uint64Bytes(in)
	buf := make([]byte, len(b)+3)
	copy(buf[3:], b)
	for _, src := range [][]byte{b, buf[3:]} {
		out, err := Uint64s(src)
		if err != nil {
			t.Fatal(err)
		}
		for i := range in {
			if out[i] != in[i] {
				t.Fatalf("key %d: got %d want %d", i, out[i], in[i])
			}
		}
	}
	if _, err := Uint64s(make([]byte, 12)); err == nil {
		t.Fatal("12 bytes accepted as uint64 keys")
	}
}
