package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// MaxHeaderSize is the largest safetensors header a reader accepts, the same
// limit as the reference implementation's.
const MaxHeaderSize = 100_000_000

// metadataKey is the header key that holds the free-form string map.
const metadataKey = "__metadata__"

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

// rank orders dtypes as the reference implementation's Dtype enum does
// (larger alignment last); the writer lays out higher ranks first so every
// tensor's data stays aligned to its element size.
func (d DType) rank() int {
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

// size is the byte size of t's data.
func (t Tensor) size() int64 {
	if t.Fill != nil {
		n, _ := dataSize(t.DType, t.Shape)
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

// viewOf is b's memory as elements of T, if the host is little-endian and
// b is aligned to T's size (its length is a multiple, checked by want).
func viewOf[T float32 | uint64](b []byte) ([]T, bool) {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if !littleEndian || len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%uintptr(size) != 0 {
		return nil, false
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/size), true
}

// dataSize is the byte size of a tensor of this shape and type; ok is false
// on a negative dimension or overflow.
func dataSize(d DType, shape []int64) (int64, bool) {
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

// checkTensors validates tensors for writing.
func checkTensors(tensors []Tensor) error {
	seen := make(map[string]bool, len(tensors))
	for _, t := range tensors {
		switch {
		case t.Name == "":
			return fmt.Errorf("%w: a tensor has no name", ErrInvalid)
		case t.Name == metadataKey:
			return fmt.Errorf("%w: tensor name %q is reserved", ErrInvalid, t.Name)
		case !utf8.ValidString(t.Name):
			return fmt.Errorf("%w: tensor name %q is not valid UTF-8", ErrInvalid, t.Name)
		case seen[t.Name]:
			return fmt.Errorf("%w: tensor %q appears twice", ErrInvalid, t.Name)
		case t.DType.Size() == 0:
			return fmt.Errorf("%w: tensor %q has dtype %q (want F32, I64 or U64)", ErrInvalid, t.Name, t.DType)
		}
		seen[t.Name] = true
		n, ok := dataSize(t.DType, t.Shape)
		if !ok {
			return fmt.Errorf("%w: tensor %q has an invalid shape %v", ErrInvalid, t.Name, t.Shape)
		}
		if t.Fill != nil && t.Data != nil {
			return fmt.Errorf("%w: tensor %q has both Data and Fill", ErrInvalid, t.Name)
		}
		if n != t.size() {
			return fmt.Errorf("%w: tensor %q: shape %v of %s needs %d bytes, data has %d", ErrInvalid, t.Name, t.Shape, t.DType, n, len(t.Data))
		}
	}
	return nil
}

// fileOrder returns the tensors in the order the writer lays them out: by
// dtype, widest first, then by name. This is the reference implementation's
// order; it keeps every tensor aligned and makes the bytes of a file depend
// only on the set of tensors, not on the order the caller listed them.
func fileOrder(tensors []Tensor) []Tensor {
	out := slices.Clone(tensors)
	slices.SortStableFunc(out, func(a, b Tensor) int {
		if a.DType.rank() != b.DType.rank() {
			return b.DType.rank() - a.DType.rank()
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// appendJSONString appends s as a JSON string, escaping as serde_json does
// (quote, backslash and control characters only), so headers match the
// reference implementation's byte for byte.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func appendInts(b []byte, v []int64) []byte {
	b = append(b, '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, x, 10)
	}
	return append(b, ']')
}

// encodeHeader returns the 8-byte length and the header, padded with spaces
// to a multiple of 8, for tensors already in file order.
func encodeHeader(tensors []Tensor, meta map[string]string) []byte {
	b := make([]byte, 8, 256)
	b = append(b, '{')
	if len(meta) > 0 {
		b = appendJSONString(b, metadataKey)
		b = append(b, ':', '{')
		for i, k := range slices.Sorted(maps.Keys(meta)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, meta[k])
		}
		b = append(b, '}')
	}
	var off int64
	for i, t := range tensors {
		if i > 0 || len(meta) > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, t.Name)
		b = append(b, `:{"dtype":`...)
		b = appendJSONString(b, string(t.DType))
		b = append(b, `,"shape":`...)
		b = appendInts(b, t.Shape)
		b = append(b, `,"data_offsets":`...)
		end := off + t.size()
		b = appendInts(b, []int64{off, end})
		b = append(b, '}')
		off = end
	}
	b = append(b, '}')
	for (len(b)-8)%8 != 0 {
		b = append(b, ' ')
	}
	binary.LittleEndian.PutUint64(b, uint64(len(b)-8))
	return b
}

// encodePlan checks tensors and meta for writing and returns the file's
// header and the tensors in file order.
func encodePlan(tensors []Tensor, meta map[string]string) (hdr []byte, ordered []Tensor, err error) {
	if err := checkTensors(tensors); err != nil {
		return nil, nil, err
	}
	for k, v := range meta {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, nil, fmt.Errorf("%w: metadata %q: %q is not valid UTF-8", ErrInvalid, k, v)
		}
	}
	ordered = fileOrder(tensors)
	return encodeHeader(ordered, meta), ordered, nil
}

// EncodeSafetensors writes tensors and meta to w as one safetensors file and
// returns the number of bytes written. The tensors are laid out in file
// order (widest dtype first, then by name); meta may be nil.
func EncodeSafetensors(w io.Writer, tensors []Tensor, meta map[string]string) (int64, error) {
	hdr, tensors, err := encodePlan(tensors, meta)
	if err != nil {
		return 0, err
	}
	var n int64
	k, err := w.Write(hdr)
	n += int64(k)
	if err != nil {
		return n, err
	}
	var buf []byte
	for _, t := range tensors {
		if t.Fill != nil {
			if buf == nil {
				buf = make([]byte, fillChunk)
			}
			size := t.size()
			for off := int64(0); off < size; off += fillChunk {
				b := buf[:min(fillChunk, size-off)]
				t.Fill(b, off)
				k, err := w.Write(b)
				n += int64(k)
				if err != nil {
					return n, err
				}
			}
			continue
		}
		k, err := w.Write(t.Data)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// fillChunk is how much of a Fill tensor EncodeSafetensors makes at a time.
const fillChunk = 1 << 20

// Header is a parsed, validated safetensors header.
type Header struct {
	// Tensors in data order (by offset).
	Tensors []HeaderEntry
	// Meta is the __metadata__ map; nil when the file has none.
	Meta map[string]string
	// DataStart is the file offset of the data section: 8 plus the header
	// length.
	DataStart int64
}

// HeaderEntry is one tensor of a header: its description and where its data
// lies, relative to the start of the data section.
type HeaderEntry struct {
	TensorInfo
	Begin, End int64
}

// ReadHeader reads and validates the header of a safetensors file of size
// bytes from r, leaving r at the start of the data section. It reads at
// most min(size, 8+MaxHeaderSize) bytes, whatever the file claims, and
// checks what the reference reader checks: the header is UTF-8 JSON, every
// tensor's dtype is known, its shape's byte size equals its data_offsets
// span, the tensors tile the data section from 0 without gap or overlap,
// and the data section ends exactly at the end of the file. It is stricter
// in also rejecting duplicate names and unknown fields. Errors wrap
// ErrFormat (or ErrSize, when the file is too short) and name the tensor.
func ReadHeader(r io.Reader, size int64) (Header, error) {
	if size < 8 {
		return Header{}, errorf(ErrSize, "file is %d bytes, too short for the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return Header{}, errorf(ErrSize, "reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return Header{}, errorf(ErrFormat, "header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if n > uint64(size-8) {
		return Header{}, errorf(ErrSize, "header length %d runs past the end of the %d-byte file", n, size)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return Header{}, errorf(ErrSize, "reading %d-byte header: %w", n, err)
	}
	h, err := parseHeader(buf)
	if err != nil {
		return Header{}, err
	}
	h.DataStart = 8 + int64(n)
	var end int64
	if len(h.Tensors) > 0 {
		end = h.Tensors[len(h.Tensors)-1].End
	}
	switch data := size - h.DataStart; {
	case end > data:
		return Header{}, errorf(ErrSize, "truncated: the tensors need %d data bytes, the file has %d", end, data)
	case end < data:
		return Header{}, errorf(ErrFormat, "%d bytes after the end of the last tensor's data", data-end)
	}
	return h, nil
}

// parseHeader parses the JSON header and validates the offsets.
func parseHeader(b []byte) (Header, error) {
	if !utf8.Valid(b) {
		return Header{}, errorf(ErrFormat, "header is not valid UTF-8")
	}
	if len(b) == 0 || b[0] != '{' {
		return Header{}, errorf(ErrFormat, "header does not start with '{'")
	}
	p := &headerParser{dec: json.NewDecoder(bytes.NewReader(b))}
	p.dec.UseNumber()
	var h Header
	if err := p.delim('{'); err != nil {
		return Header{}, err
	}
	seen := map[string]bool{}
	for p.dec.More() {
		key, err := p.str("a tensor name")
		if err != nil {
			return Header{}, err
		}
		if seen[key] {
			return Header{}, errorf(ErrFormat, "header names %q twice", key)
		}
		seen[key] = true
		if key == metadataKey {
			if h.Meta, err = p.meta(); err != nil {
				return Header{}, err
			}
			continue
		}
		if key == "" {
			return Header{}, errorf(ErrFormat, "header has a tensor with an empty name")
		}
		e, err := p.tensor(key)
		if err != nil {
			return Header{}, err
		}
		h.Tensors = append(h.Tensors, e)
	}
	if err := p.delim('}'); err != nil {
		return Header{}, err
	}
	if tok, err := p.dec.Token(); err != io.EOF {
		if err != nil {
			return Header{}, errorf(ErrFormat, "header has more than spaces after its closing brace (%v)", err)
		}
		return Header{}, errorf(ErrFormat, "header has %v after its closing brace", tok)
	}
	if err := checkOffsets(h.Tensors); err != nil {
		return Header{}, err
	}
	return h, nil
}

// checkOffsets sorts entries by offset and checks that they tile the data
// section and match their shapes.
func checkOffsets(es []HeaderEntry) error {
	slices.SortStableFunc(es, func(a, b HeaderEntry) int {
		if a.Begin != b.Begin {
			return cmpInt(a.Begin, b.Begin)
		}
		return cmpInt(a.End, b.End)
	})
	var pos int64
	for _, e := range es {
		switch {
		case e.End < e.Begin:
			return errorf(ErrFormat, "tensor %q: data_offsets [%d,%d] end before they begin", e.Name, e.Begin, e.End)
		case e.Begin < pos:
			return errorf(ErrFormat, "tensor %q: data_offsets [%d,%d] overlap the previous tensor, which ends at %d", e.Name, e.Begin, e.End, pos)
		case e.Begin > pos:
			return errorf(ErrFormat, "tensor %q: data_offsets [%d,%d] leave a gap after the previous tensor, which ends at %d", e.Name, e.Begin, e.End, pos)
		}
		n, ok := dataSize(e.DType, e.Shape)
		if !ok {
			return errorf(ErrFormat, "tensor %q: shape %v overflows", e.Name, e.Shape)
		}
		if n != e.End-e.Begin {
			return errorf(ErrFormat, "tensor %q: shape %v of %s needs %d bytes, data_offsets [%d,%d] span %d", e.Name, e.Shape, e.DType, n, e.Begin, e.End, e.End-e.Begin)
		}
		pos = e.End
	}
	return nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// headerParser reads a header token by token, so that it can keep the
// order, refuse duplicates and unknown fields, and never build values of a
// shape it did not ask for.
type headerParser struct {
	dec *json.Decoder
}

func (p *headerParser) token(what string) (json.Token, error) {
	tok, err := p.dec.Token()
	if err != nil {
		return nil, errorf(ErrFormat, "header JSON: reading %s: %w", what, err)
	}
	return tok, nil
}

func (p *headerParser) delim(d json.Delim) error {
	tok, err := p.token(fmt.Sprintf("'%c'", d))
	if err != nil {
		return err
	}
	if tok != d {
		return errorf(ErrFormat, "header JSON: want '%c', got %v", d, tok)
	}
	return nil
}

func (p *headerParser) str(what string) (string, error) {
	tok, err := p.token(what)
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", errorf(ErrFormat, "header JSON: %s is %v, not a string", what, tok)
	}
	return s, nil
}

func (p *headerParser) int(what string) (int64, error) {
	tok, err := p.token(what)
	if err != nil {
		return 0, err
	}
	num, ok := tok.(json.Number)
	if !ok {
		return 0, errorf(ErrFormat, "%s is %v, not a number", what, tok)
	}
	x, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil || x < 0 {
		return 0, errorf(ErrFormat, "%s is %s, not a non-negative integer", what, num)
	}
	return x, nil
}

// ints reads an array of non-negative integers.
func (p *headerParser) ints(what string) ([]int64, error) {
	if err := p.delim('['); err != nil {
		return nil, errorf(ErrFormat, "%s: %w", what, err)
	}
	v := []int64{}
	for p.dec.More() {
		x, err := p.int(what)
		if err != nil {
			return nil, err
		}
		v = append(v, x)
	}
	if err := p.delim(']'); err != nil {
		return nil, errorf(ErrFormat, "%s: %w", what, err)
	}
	return v, nil
}

func (p *headerParser) meta() (map[string]string, error) {
	tok, err := p.token(metadataKey)
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil // "__metadata__": null, as the reference accepts
	}
	if tok != json.Delim('{') {
		return nil, errorf(ErrFormat, "%s is %v, not an object", metadataKey, tok)
	}
	m := map[string]string{}
	for p.dec.More() {
		k, err := p.str(metadataKey + " key")
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, errorf(ErrFormat, "%s has key %q twice", metadataKey, k)
		}
		if m[k], err = p.str(fmt.Sprintf("%s[%q]", metadataKey, k)); err != nil {
			return nil, err
		}
	}
	return m, p.delim('}')
}

func (p *headerParser) tensor(name string) (HeaderEntry, error) {
	e := HeaderEntry{TensorInfo: TensorInfo{Name: name}}
	if err := p.delim('{'); err != nil {
		return e, errorf(ErrFormat, "tensor %q: %w", name, err)
	}
	var haveDType, haveShape, haveOffsets bool
	for p.dec.More() {
		field, err := p.str(fmt.Sprintf("tensor %q field", name))
		if err != nil {
			return e, err
		}
		what := fmt.Sprintf("tensor %q %s", name, field)
		switch {
		case field == "dtype" && !haveDType:
			haveDType = true
			d, err := p.str(what)
			if err != nil {
				return e, err
			}
			e.DType = DType(d)
			if e.DType.Size() == 0 {
				return e, errorf(ErrFormat, "tensor %q: dtype %q is not supported (want F32, I64 or U64)", name, d)
			}
		case field == "shape" && !haveShape:
			haveShape = true
			if e.Shape, err = p.ints(what); err != nil {
				return e, err
			}
		case field == "data_offsets" && !haveOffsets:
			haveOffsets = true
			off, err := p.ints(what)
			if err != nil {
				return e, err
			}
			if len(off) != 2 {
				return e, errorf(ErrFormat, "tensor %q: data_offsets has %d numbers, want 2", name, len(off))
			}
			e.Begin, e.End = off[0], off[1]
		default:
			return e, errorf(ErrFormat, "tensor %q: unexpected or repeated field %q", name, field)
		}
	}
	if err := p.delim('}'); err != nil {
		return e, errorf(ErrFormat, "tensor %q: %w", name, err)
	}
	if !haveDType || !haveShape || !haveOffsets {
		return e, errorf(ErrFormat, "tensor %q: want dtype, shape and data_offsets", name)
	}
	return e, nil
}

// DecodeSafetensors reads a whole safetensors file of size bytes from r:
// its header, and its tensors in data order. It allocates no more than size
// bytes for data, however the header is crafted.
func DecodeSafetensors(r io.Reader, size int64) (Header, []Tensor, error) {
	h, err := ReadHeader(r, size)
	if err != nil {
		return Header{}, nil, err
	}
	tensors := make([]Tensor, len(h.Tensors))
	for i, e := range h.Tensors {
		data := make([]byte, e.End-e.Begin)
		if _, err := io.ReadFull(r, data); err != nil {
			return Header{}, nil, errorf(ErrSize, "tensor %q: reading %d bytes: %w", e.Name, len(data), err)
		}
		tensors[i] = Tensor{Name: e.Name, DType: e.DType, Shape: e.Shape, Data: data}
	}
	var one [1]byte
	if k, _ := io.ReadFull(r, one[:]); k != 0 {
		return Header{}, nil, errorf(ErrSize, "the file is longer than the %d bytes it was said to be", size)
	}
	return h, tensors, nil
}
