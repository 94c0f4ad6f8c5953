package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/paramserv/paramserv/internal/ckptformat"
)

// MaxHeaderSize is the largest safetensors header a reader accepts, the same
// limit as the reference implementation's.
const MaxHeaderSize = 100_000_000

// metadataKey is the header key that holds the free-form string map.
const metadataKey = "__metadata__"

// dataSize is DataSize.
func dataSize(d DType, shape []int64) (int64, bool) { return ckptformat.DataSize(d, shape) }

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
		if n != t.ByteSize() {
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
		if a.DType.Rank() != b.DType.Rank() {
			return b.DType.Rank() - a.DType.Rank()
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
		end := off + t.ByteSize()
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
			size := t.ByteSize()
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
