package ckptformat

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"
)

// DType is a tensor element type, by its safetensors name.
type DType string

// The element types a checkpoint uses. All are little-endian on disk.
const (
	F32 DType = "F32" // float32
	I64 DType = "I64" // int64
	U64 DType = "U64" // uint64
)

// Size is the size of one element in bytes, 0 for an unknown type.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case I64, U64:
		return 8
	}
	return 0
}

// Rank orders dtypes as the reference implementation's Dtype enum does
// (larger alignment last); the writer lays out higher ranks first so every
// tensor's data stays aligned to its element size.
func (d DType) Rank() int {
	switch d {
	case F32:
		return 1
	case I64:
		return 2
	case U64:
		return 3
	}
	return 0
}

// Tensor is one named, typed, row-major array. Data holds the elements
// little-endian, exactly as on disk: len(Data) is the product of Shape times
// DType.Size(). An empty Shape is a scalar (one element).
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte

	// Fill, set by the ...TensorFill constructors (and Data then nil),
	// makes the tensor's bytes as WriteShard and EncodeSafetensors write
	// them: fill(dst, off) writes bytes [off, off+len(dst)) of the data
	// into dst, off and len(dst) multiples of the element size. It may be
	// called from several goroutines at once, for ranges that do not
	// overlap, in any order. Nothing else reads such a tensor: it is for
	// streaming a large tensor to a file without building it in memory.
	Fill func(dst []byte, off int64)
}

// ByteSize is the byte size of t's data (made by Fill, or in Data).
func (t Tensor) ByteSize() int64 {
	if t.Fill != nil {
		n, _ := DataSize(t.DType, t.Shape)
		return n
	}
	return int64(len(t.Data))
}

// Float32TensorFill returns an F32 tensor whose data fill makes as the
// tensor is written (see Tensor.Fill): fill(dst, i) writes elements i,
// i+1, ... into dst.
func Float32TensorFill(name string, shape []int64, fill func(dst []float32, i int)) Tensor {
	return Tensor{Name: name, DType: F32, Shape: slices.Clone(shape), Fill: fillOf(fill)}
}

// Int64TensorFill is Float32TensorFill for I64.
func Int64TensorFill(name string, shape []int64, fill func(dst []int64, i int)) Tensor {
	return Tensor{Name: name, DType: I64, Shape: slices.Clone(shape), Fill: fillOf(fill)}
}

// Uint64TensorFill is Float32TensorFill for U64.
func Uint64TensorFill(name string, shape []int64, fill func(dst []uint64, i int)) Tensor {
	return Tensor{Name: name, DType: U64, Shape: slices.Clone(shape), Fill: fillOf(fill)}
}

// fillOf turns a fill of elements into one of their little-endian bytes:
// on a little-endian host the elements are written in place where dst is
// aligned, else through a copy.
func fillOf[T float32 | int64 | uint64](fill func(dst []T, i int)) func([]byte, int64) {
	return func(dst []byte, off int64) {
		var zero T
		size := int(unsafe.Sizeof(zero))
		n := len(dst) / size
		if n == 0 {
			return
		}
		if littleEndian && uintptr(unsafe.Pointer(&dst[0]))%uintptr(size) == 0 {
			fill(unsafe.Slice((*T)(unsafe.Pointer(&dst[0])), n), int(off)/size)
			return
		}
		v := make([]T, n)
		fill(v, int(off)/size)
		switch v := any(v).(type) {
		case []float32:
			for i, x := range v {
				binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(x))
			}
		case []int64:
			for i, x := range v {
				binary.LittleEndian.PutUint64(dst[8*i:], uint64(x))
			}
		case []uint64:
			for i, x := range v {
				binary.LittleEndian.PutUint64(dst[8*i:], x)
			}
		}
	}
}

// TensorInfo describes a tensor without its data.
type TensorInfo struct {
	Name  string  `json:"name"`
	DType DType   `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// Info returns t's description.
func (t Tensor) Info() TensorInfo {
	return TensorInfo{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape)}
}

// littleEndian: the host stores numbers as the files do, so tensors convert
// with one memory copy.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// asBytes is the memory of a slice of fixed-size numbers, as bytes.
func asBytes[T float32 | int64 | uint64](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(unsafe.Sizeof(v[0])))
}

// Float32TensorOf returns an F32 tensor of v's elements without copying
// them on a little-endian host: its Data is v's memory, so v must not
// change while the tensor is in use. Elsewhere it is Float32Tensor.
func Float32TensorOf(name string, shape []int64, v []float32) Tensor {
	if !littleEndian {
		return Float32Tensor(name, shape, v)
	}
	return Tensor{Name: name, DType: F32, Shape: slices.Clone(shape), Data: nonNil(asBytes(v))}
}

// Int64TensorOf is Float32TensorOf for I64.
func Int64TensorOf(name string, shape []int64, v []int64) Tensor {
	if !littleEndian {
		return Int64Tensor(name, shape, v)
	}
	return Tensor{Name: name, DType: I64, Shape: slices.Clone(shape), Data: nonNil(asBytes(v))}
}

// Uint64TensorOf is Float32TensorOf for U64.
func Uint64TensorOf(name string, shape []int64, v []uint64) Tensor {
	if !littleEndian {
		return Uint64Tensor(name, shape, v)
	}
	return Tensor{Name: name, DType: U64, Shape: slices.Clone(shape), Data: nonNil(asBytes(v))}
}

// nonNil keeps an empty tensor's Data an empty slice, as the copying
// constructors make it.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Float32Tensor returns an F32 tensor holding a copy of v.
func Float32Tensor(name string, shape []int64, v []float32) Tensor {
	b := make([]byte, 4*len(v))
	if littleEndian {
		copy(b, asBytes(v))
		return Tensor{Name: name, DType: F32, Shape: slices.Clone(shape), Data: b}
	}
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return Tensor{Name: name, DType: F32, Shape: slices.Clone(shape), Data: b}
}

// Int64Tensor returns an I64 tensor holding a copy of v.
func Int64Tensor(name string, shape []int64, v []int64) Tensor {
	b := make([]byte, 8*len(v))
	if littleEndian {
		copy(b, asBytes(v))
		return Tensor{Name: name, DType: I64, Shape: slices.Clone(shape), Data: b}
	}
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return Tensor{Name: name, DType: I64, Shape: slices.Clone(shape), Data: b}
}

// Uint64Tensor returns a U64 tensor holding a copy of v.
func Uint64Tensor(name string, shape []int64, v []uint64) Tensor {
	b := make([]byte, 8*len(v))
	if littleEndian {
		copy(b, asBytes(v))
		return Tensor{Name: name, DType: U64, Shape: slices.Clone(shape), Data: b}
	}
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return Tensor{Name: name, DType: U64, Shape: slices.Clone(shape), Data: b}
}

func (t Tensor) want(d DType) error {
	if t.DType != d {
		return fmt.Errorf("%w: tensor %q is %s, not %s", ErrDType, t.Name, t.DType, d)
	}
	if len(t.Data)%d.Size() != 0 {
		return fmt.Errorf("%w: tensor %q has %d data bytes, not a multiple of %d", ErrFormat, t.Name, len(t.Data), d.Size())
	}
	return nil
}

// Float32s decodes an F32 tensor's elements, bit for bit (NaN payloads and
// the sign of zero survive).
func (t Tensor) Float32s() ([]float32, error) {
	if err := t.want(F32); err != nil {
		return nil, err
	}
	v := make([]float32, len(t.Data)/4)
	if littleEndian {
		copy(asBytes(v), t.Data)
		return v, nil
	}
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return v, nil
}

// Int64s decodes an I64 tensor's elements.
func (t Tensor) Int64s() ([]int64, error) {
	if err := t.want(I64); err != nil {
		return nil, err
	}
	v := make([]int64, len(t.Data)/8)
	if littleEndian {
		copy(asBytes(v), t.Data)
		return v, nil
	}
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(t.Data[8*i:]))
	}
	return v, nil
}

// Uint64s decodes a U64 tensor's elements.
func (t Tensor) Uint64s() ([]uint64, error) {
	if err := t.want(U64); err != nil {
		return nil, err
	}
	v := make([]uint64, len(t.Data)/8)
	if littleEndian {
		copy(asBytes(v), t.Data)
		return v, nil
	}
	for i := range v {
		v[i] = binary.LittleEndian.Uint64(t.Data[8*i:])
	}
	return v, nil
}

// Float32sView is Float32s without the copy where it can: on a
// little-endian host, with Data aligned to 4 bytes, the result is Data's
// memory, to be read only and not kept beyond Data's use. Elsewhere it is
// Float32s. A restore reads a file of gigabytes through it once.
func (t Tensor) Float32sView() ([]float32, error) {
	if err := t.want(F32); err != nil {
		return nil, err
	}
	if v, ok := viewOf[float32](t.Data); ok {
		return v, nil
	}
	return t.Float32s()
}

// Uint64sView is Float32sView for U64.
func (t Tensor) Uint64sView() ([]uint64, error) {
	if err := t.want(U64); err != nil {
		return nil, err
	}
	if v, ok := viewOf[uint64](t.Data); ok {
		return v, nil
	}
	return t.Uint64s()
}

// Int64sView is Float32sView for I64.
func (t Tensor) Int64sView() ([]int64, error) {
	if err := t.want(I64); err != nil {
		return nil, err
	}
	if v, ok := viewOf[int64](t.Data); ok {
		return v, nil
	}
	return t.Int64s()
}

// viewOf is b's memory as elements of T, if the host is little-endian and
// b is aligned to T's size (its length is a multiple, checked by want).
func viewOf[T float32 | uint64 | int64](b []byte) ([]T, bool) {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if !littleEndian || len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%uintptr(size) != 0 {
		return nil, false
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/size), true
}

// DataSize is the byte size of a tensor of this shape and type; ok is false
// on a negative dimension or overflow.
func DataSize(d DType, shape []int64) (int64, bool) {
	n := uint64(d.Size())
	for _, x := range shape {
		if x < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(x))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		n = lo
	}
	return int64(n), true
}
