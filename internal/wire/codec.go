// Package wire converts between Go slices and the raw little-endian bytes
// that carry tensors and keys on the wire (see docs/WIRE.md).
//
// On little-endian machines (every platform Go ships for servers except
// s390x and ppc64) the conversions are views: no copy and no allocation. The
// view shares memory with its argument, so the caller must not modify the
// slice while a message holding the view is being marshalled.
package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Float32Bytes returns f as raw little-endian bytes (a view where possible).
func Float32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
	}
	b := make([]byte, len(f)*4)
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// Uint64Bytes returns k as raw little-endian bytes (a view where possible).
func Uint64Bytes(k []uint64) []byte {
	if len(k) == 0 {
		return nil
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&k[0])), len(k)*8)
	}
	b := make([]byte, len(k)*8)
	for i, v := range k {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return b
}

// Float32s interprets b as little-endian float32 values. It returns a view
// when b is suitably aligned, else a copy. A length that is not a multiple
// of 4 is an error.
func Float32s(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("wire: %d bytes is not a whole number of float32 values", len(b))
	}
	if len(b) == 0 {
		return nil, nil
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4), nil
	}
	f := make([]float32, len(b)/4)
	DecodeFloat32s(f, b)
	return f, nil
}

// DecodeFloat32s copies len(dst) little-endian float32 values from b into dst.
func DecodeFloat32s(dst []float32, b []byte) {
	if littleEndian {
		copy(Float32Bytes(dst), b)
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}

// Uint64s interprets b as little-endian uint64 values, a view when aligned.
func Uint64s(b []byte) ([]uint64, error) {
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("wire: %d bytes is not a whole number of uint64 keys", len(b))
	}
	if len(b) == 0 {
		return nil, nil
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%8 == 0 {
		return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8), nil
	}
	k := make([]uint64, len(b)/8)
	for i := range k {
		k[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return k, nil
}
