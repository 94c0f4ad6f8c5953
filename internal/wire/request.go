package wire

import (
	"bufio"
	"io"
	"math"

	"github.com/paramserv/paramserv/internal/hugemem"
)

// DenseSection is one variable's values: in a request, a push's gradient;
// in a reply, the values pulled. Layout: u16 name length, name, u32 count,
// count float32.
type DenseSection struct {
	Name []byte
	Data []float32
	// Bad is, in a request, the index of the first NaN or ±Inf in Data, or
	// -1; MaxAbs, when Bad is -1, the largest |value| of Data.
	Bad    int
	MaxAbs float32
}

// SparseSection is one table's part of a request. Layout: u16 name
// length, name, u8 key mode, u8 argument, u32 key count, the keys
// (KeysInline only, u64 each), then in a push section u32 value count and
// the values (float32, key count × the table's dim).
type SparseSection struct {
	Table   []byte
	Mode    KeyMode
	Arg     int
	NumKeys int
	Keys    []uint64  // KeysInline: the keys
	Values  []float32 // push: the gradients
	Bad     int       // push: the index of the first NaN or ±Inf in Values, or -1
	MaxAbs  float32   // push, when Bad is -1: the largest |value| of Values
	// Incremental pull sections: the ps incarnation and table version of
	// the rows the worker holds (Since 0: none), and a bitmap of the keys
	// whose rows it lacks (BitmapWords(NumKeys) words; nil when Since is 0).
	Incarnation, Since uint64
	Lack               []uint64
}

// BitmapWords is the number of uint64 words of a bitmap of n bits.
func BitmapWords(n int) int { return (n + 63) / 64 }

// Request is a request as the ps reads it (ReadRequest). Its slices are
// views of memory that the next ReadRequest reuses; the reply may reuse
// Floats once the request is done with.
type Request struct {
	ReqHeader
	Dense      []DenseSection
	SparsePush []SparseSection
	SparsePull []SparseSection
	// DenseHeld is what the worker holds of the dense values, in a request
	// with DenseIncremental.
	DenseHeld DenseHeld

	hdr    [ReqHeaderLen]byte
	body   BodyReader
	names  []byte
	floats []float32
	keys   []uint64
	offs   []sectionOffs
}

// sectionOffs places a section's name and payloads in the arenas, which
// may move while the request is read.
type sectionOffs struct {
	name, nameEnd   int
	keys, keysEnd   int
	lack, lackEnd   int
	inc, since      uint64
	floats, floatsE int
	bad             int
	maxAbs          uint32 // float32 bits
}

// Floats returns the request's float memory, for reuse by the reply after
// the request is done with: a slice of length n, reallocated only if its
// capacity is short.
func (r *Request) Floats(n int) []float32 {
	if cap(r.floats) < n {
		r.floats = hugemem.Float32s(n)
	}
	return r.floats[:n]
}

// ReadRequest reads the next request from br into r. It returns io.EOF if
// the connection ended cleanly between frames, a *FrameError if the frame
// is malformed (the connection cannot go on), or the I/O error.
func (r *Request) ReadRequest(br *bufio.Reader) error {
	return r.ReadRequestAdmit(br, nil)
}

// ReadRequestAdmit is ReadRequest with admit, if not nil, asked about each
// request once its header is read and checked, before any of its body is:
// an error from admit is returned as it is, with r.ReqHeader the request's
// header and its body (r.Body bytes) still unread in br, so the caller can
// skip it (DiscardBody) and answer, or close the connection.
func (r *Request) ReadRequestAdmit(br *bufio.Reader, admit func(h *ReqHeader) error) error {
	if _, err := io.ReadFull(br, r.hdr[:]); err != nil {
		return err // io.EOF only if the connection ended between frames
	}
	h, err := ParseReqHeader(r.hdr[:])
	if err != nil {
		return err
	}
	r.ReqHeader = h
	if admit != nil {
		if err := admit(&r.ReqHeader); err != nil {
			return err
		}
	}
	r.names, r.floats, r.keys, r.offs = r.names[:0], r.floats[:0], r.keys[:0], r.offs[:0]
	r.body = BodyReader{R: br, Left: h.Body}
	for range h.Dense {
		if err := r.readDense(); err != nil {
			return err
		}
	}
	for i := range h.SparsePush + h.SparsePull {
		if err := r.readSparse(i); err != nil {
			return err
		}
	}
	if err := r.readDenseHeld(); err != nil {
		return err
	}
	if r.body.Left != 0 {
		return frameErr("%d bytes after the last section", r.body.Left)
	}
	r.views()
	return nil
}

// DiscardBody reads and drops the body of the request whose header
// ReadRequestAdmit read before its admit refused it, so the connection can
// carry the next one; it keeps none of it.
func (r *Request) DiscardBody(br *bufio.Reader) error {
	_, err := io.CopyN(io.Discard, br, r.Body)
	return noEOF(err)
}

// Held is the bytes of memory r keeps for reuse between requests (its
// arenas), whatever the last request used of them.
func (r *Request) Held() int64 {
	return int64(cap(r.names)) + 4*int64(cap(r.floats)) + 8*int64(cap(r.keys))
}

// Release drops the memory r keeps for reuse: the next request allocates
// afresh.
func (r *Request) Release() {
	r.names, r.floats, r.keys = nil, nil, nil
	r.Dense, r.SparsePush, r.SparsePull = nil, nil, nil
}

// readDense reads one dense push section into the arenas.
func (r *Request) readDense() error {
	body := &r.body
	var err error
	o := sectionOffs{name: len(r.names)}
	if r.names, err = body.Name(r.names, "dense section"); err != nil {
		return err
	}
	o.nameEnd, o.floats = len(r.names), len(r.floats)
	n, err := body.Uint32("dense section count")
	if err != nil {
		return err
	}
	if r.floats, o.bad, o.maxAbs, err = body.FloatsMax(r.floats, n, "dense section"); err != nil {
		return err
	}
	o.floatsE = len(r.floats)
	r.offs = append(r.offs, o)
	return nil
}

// readSparse reads sparse section i (push sections first, then pull
// sections) into the arenas.
func (r *Request) readSparse(i int) error {
	h, body := &r.ReqHeader, &r.body
	var err error
	push := i < h.SparsePush
	o := sectionOffs{name: len(r.names)}
	if r.names, err = body.Name(r.names, "sparse section"); err != nil {
		return err
	}
	o.nameEnd = len(r.names)
	mode, err := body.Uint8("key mode")
	if err != nil {
		return err
	}
	arg, err := body.Uint8("key mode argument")
	if err != nil {
		return err
	}
	nkeys, err := body.Uint32("key count")
	if err != nil {
		return err
	}
	if err := r.readKeys(i, push, KeyMode(mode), arg, nkeys, &o); err != nil {
		return err
	}
	o.keysEnd = max(o.keysEnd, o.keys)
	o.lack, o.lackEnd = len(r.keys), len(r.keys)
	if !push && h.Incremental {
		if o.inc, err = body.Uint64("incarnation"); err != nil {
			return err
		}
		if o.since, err = body.Uint64("version"); err != nil {
			return err
		}
		if o.since != 0 {
			if r.keys, err = body.Keys(r.keys, int64(BitmapWords(int(nkeys))), "lack bitmap"); err != nil {
				return err
			}
			o.lackEnd = len(r.keys)
		}
	}
	o.floats, o.floatsE, o.bad = len(r.floats), len(r.floats), -1
	if push {
		n, err := body.Uint32("value count")
		if err != nil {
			return err
		}
		if r.floats, o.bad, o.maxAbs, err = body.FloatsMax(r.floats, n, "values"); err != nil {
			return err
		}
		o.floatsE = len(r.floats)
	}
	r.offs = append(r.offs, o)
	s := SparseSection{Mode: KeyMode(mode), Arg: arg, NumKeys: int(nkeys)}
	if push {
		r.SparsePush = append(r.SparsePush[:i], s)
	} else {
		r.SparsePull = append(r.SparsePull[:i-h.SparsePush], s)
	}
	return nil
}

// readKeys checks sparse section i's key mode and reads its inline keys.
func (r *Request) readKeys(i int, push bool, mode KeyMode, arg int, nkeys int64, o *sectionOffs) error {
	switch mode {
	case KeysInline:
		if arg != NoSlot && arg >= CacheSlots {
			return frameErr("sparse section %d keeps its keys in slot %d, there are %d", i, arg, CacheSlots)
		}
		if arg != NoSlot && nkeys > MaxCachedKeys {
			return frameErr("sparse section %d keeps %d keys in a slot, at most %d", i, nkeys, MaxCachedKeys)
		}
		o.keys = len(r.keys)
		var err error
		if r.keys, err = r.body.Keys(r.keys, nkeys, "keys"); err != nil {
			return err
		}
		o.keysEnd = len(r.keys)
	case KeysCached:
		if arg >= CacheSlots {
			return frameErr("sparse section %d names slot %d, there are %d", i, arg, CacheSlots)
		}
	case KeysAsPush:
		if push || arg >= r.ReqHeader.SparsePush {
			return frameErr("sparse section %d takes the keys of push section %d, of %d", i, arg, r.ReqHeader.SparsePush)
		}
	default:
		return frameErr("sparse section %d: unknown key mode %d", i, mode)
	}
	return nil
}

// readDenseHeld reads what the worker holds of the dense values, in a
// request with DenseIncremental.
func (r *Request) readDenseHeld() error {
	r.DenseHeld = DenseHeld{}
	if !r.DenseIncremental {
		return nil
	}
	d, body := &r.DenseHeld, &r.body
	var err error
	if d.Incarnation, err = body.Uint64("dense incarnation"); err != nil {
		return err
	}
	if d.Since, err = body.Uint64("dense version"); err != nil {
		return err
	}
	n, err := body.Uint32("dense block count")
	if err != nil {
		return err
	}
	d.Blocks = int(n)
	return nil
}

// views makes the sections views of the arenas, which have their final
// size.
func (r *Request) views() {
	h := &r.ReqHeader
	r.Dense = r.Dense[:0]
	for i := range h.Dense {
		o := r.offs[i]
		r.Dense = append(r.Dense, DenseSection{Name: r.names[o.name:o.nameEnd], Data: r.floats[o.floats:o.floatsE], Bad: o.bad, MaxAbs: maxAbsOf(o)})
	}
	r.SparsePush, r.SparsePull = r.SparsePush[:h.SparsePush], r.SparsePull[:h.SparsePull]
	for i := range h.SparsePush + h.SparsePull {
		o := r.offs[h.Dense+i]
		s := &r.SparsePull
		j := i - h.SparsePush
		if i < h.SparsePush {
			s, j = &r.SparsePush, i
		}
		sec := &(*s)[j]
		sec.Table = r.names[o.name:o.nameEnd]
		sec.Keys = r.keys[o.keys:o.keysEnd]
		sec.Values = r.floats[o.floats:o.floatsE]
		sec.Bad, sec.MaxAbs = o.bad, maxAbsOf(o)
		sec.Incarnation, sec.Since, sec.Lack = o.inc, o.since, nil
		if o.since != 0 {
			sec.Lack = r.keys[o.lack:o.lackEnd]
		}
	}
}

// maxAbsOf is the largest |value| of a section read whole and finite, or 0.
func maxAbsOf(o sectionOffs) float32 {
	if o.bad >= 0 {
		return 0
	}
	return math.Float32frombits(o.maxAbs)
}
