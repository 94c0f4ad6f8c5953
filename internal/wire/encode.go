package wire

import (
	"encoding/binary"
	"io"
	"net"
)

// Frame builds one frame as buffers for a single writev: the header and
// section headers in its own reused memory, payloads as views of the
// caller's slices (not copied). Sections must be added in frame order:
// dense, then sparse push, then sparse pull (requests); dense, then sparse
// (replies).
type Frame struct {
	meta []byte
	segs []segment
	bufs net.Buffers // what WriteTo writes (and consumes)
	arr  net.Buffers // bufs' memory
	hdr  int         // header bytes at the start of meta
	pay  int64       // payload bytes
	nd   int         // dense sections
	nsp  int         // sparse push sections (replies: sparse sections)
	nsl  int         // sparse pull sections
}

// segment is either meta[off:end] or payload.
type segment struct {
	off, end int
	payload  []byte
}

// Reset starts a new frame whose header is hdrLen bytes.
func (f *Frame) Reset(hdrLen int) {
	f.meta = append(f.meta[:0], make([]byte, hdrLen)...)
	f.segs = f.segs[:0]
	f.hdr, f.pay, f.nd, f.nsp, f.nsl = hdrLen, 0, 0, 0, 0
}

func (f *Frame) put(b ...byte) { f.meta = append(f.meta, b...) }

func (f *Frame) u16(x int) { f.meta = binary.LittleEndian.AppendUint16(f.meta, uint16(x)) }
func (f *Frame) u32(x int) { f.meta = binary.LittleEndian.AppendUint32(f.meta, uint32(x)) }

func (f *Frame) name(s string) {
	f.u16(len(s))
	f.meta = append(f.meta, s...)
}

// payload ends the meta bytes written since the last payload and adds p.
func (f *Frame) payload(p []byte) {
	if len(p) == 0 {
		return
	}
	f.flushMeta()
	f.segs = append(f.segs, segment{payload: p})
	f.pay += int64(len(p))
}

func (f *Frame) flushMeta() {
	start := 0
	if n := len(f.segs); n > 0 {
		for i := n - 1; i >= 0; i-- {
			if f.segs[i].payload == nil {
				start = f.segs[i].end
				break
			}
		}
	}
	if start < len(f.meta) {
		f.segs = append(f.segs, segment{off: start, end: len(f.meta)})
	}
}

// Dense adds a dense section: a push's gradient or a pulled value.
func (f *Frame) Dense(name string, data []float32) {
	f.name(name)
	f.u32(len(data))
	f.payload(Float32Bytes(data))
	f.nd++
}

// SparsePush adds a sparse push section. keys are sent only with
// KeysInline.
func (f *Frame) SparsePush(table string, mode KeyMode, arg, numKeys int, keys []uint64, values []float32) {
	f.sparse(table, mode, arg, numKeys, keys)
	f.u32(len(values))
	f.payload(Float32Bytes(values))
	f.nsp++
}

// SparsePull adds a sparse pull section.
func (f *Frame) SparsePull(table string, mode KeyMode, arg, numKeys int, keys []uint64) {
	f.sparse(table, mode, arg, numKeys, keys)
	f.nsl++
}

// SparsePullIncr adds an incremental sparse pull section (a request with
// Incremental): the rows held are of incarnation inc and version since
// (0: none held), and lack (BitmapWords(numKeys) words) marks the keys
// whose rows are not held; it is not sent when since is 0.
func (f *Frame) SparsePullIncr(table string, mode KeyMode, arg, numKeys int, keys []uint64, inc, since uint64, lack []uint64) {
	f.sparse(table, mode, arg, numKeys, keys)
	f.u64(inc)
	f.u64(since)
	if since != 0 {
		f.payload(Uint64Bytes(lack))
	}
	f.nsl++
}

// DenseHeld ends an incremental dense pull request (DenseIncremental)
// with what the worker holds: after the sparse pull sections, u64
// incarnation, u64 version (0: none held), u32 block count.
func (f *Frame) DenseHeld(d DenseHeld) {
	f.u64(d.Incarnation)
	f.u64(d.Since)
	f.u32(d.Blocks)
}

// DenseIncrHead starts the reply to an incremental dense pull, before its
// dense sections: u64 the version of the ps's dense values now, u32 the
// block count, and the bitmap of the blocks that come (BitmapWords(blocks)
// words; block i is bit i%64 of word i/64).
func (f *Frame) DenseIncrHead(version uint64, blocks int, sel []uint64) {
	f.u64(version)
	f.u32(blocks)
	f.payload(Uint64Bytes(sel))
}

// DenseBlocksOf adds a dense section of a reply to an incremental dense
// pull: the name, u32 the count of values sent, then the values of the
// variable's blocks marked in sel, in order; first is the number of the
// variable's first block in sel. It returns the values sent.
func (f *Frame) DenseBlocksOf(name string, values []float32, sel []uint64, first int) int {
	f.name(name)
	at := len(f.meta)
	f.u32(0)
	n := 0
	nb := DenseBlocks(len(values))
	for b := 0; b < nb; {
		if !BitSet(sel, first+b) {
			b++
			continue
		}
		e := b + 1
		for e < nb && BitSet(sel, first+e) {
			e++
		}
		lo, hi := b*DenseBlock, min(e*DenseBlock, len(values))
		f.payload(Float32Bytes(values[lo:hi]))
		n += hi - lo
		b = e
	}
	binary.LittleEndian.PutUint32(f.meta[at:], uint32(n))
	f.nd++
	return n
}

// BitSet reports whether bit i of bitmap b is set.
func BitSet(b []uint64, i int) bool { return b[i>>6]&(1<<(i&63)) != 0 }

// SparseValuesIncr adds a reply's sparse section answering an incremental
// pull section: the table's version, the value count, then, unless every
// row comes (sel nil), the bitmap of the keys whose rows come, then their
// values in key order.
func (f *Frame) SparseValuesIncr(version uint64, values []float32, sel []uint64) {
	f.u64(version)
	f.u32(len(values))
	if sel != nil {
		f.payload(Uint64Bytes(sel))
	}
	f.payload(Float32Bytes(values))
	f.nsp++
}

func (f *Frame) u64(x uint64) { f.meta = binary.LittleEndian.AppendUint64(f.meta, x) }

func (f *Frame) sparse(table string, mode KeyMode, arg, numKeys int, keys []uint64) {
	f.name(table)
	f.put(byte(mode), byte(arg))
	f.u32(numKeys)
	if mode == KeysInline {
		f.payload(Uint64Bytes(keys))
	}
}

// SparseValues adds a reply's sparse section: the values of one pull
// section.
func (f *Frame) SparseValues(values []float32) {
	f.u32(len(values))
	f.payload(Float32Bytes(values))
	f.nsp++
}

// Request finishes a request frame with h (its section counts and body
// length are filled in) and returns its buffers.
func (f *Frame) Request(h ReqHeader) net.Buffers {
	h.Dense, h.SparsePush, h.SparsePull, h.Body = f.nd, f.nsp, f.nsl, f.BodyLen()
	h.Put(f.meta[:ReqHeaderLen])
	return f.buffers()
}

// Reply finishes a reply frame with h (its section counts and body length
// are filled in) and returns its buffers.
func (f *Frame) Reply(h RepHeader) net.Buffers {
	h.Dense, h.Sparse, h.Body = f.nd, f.nsp, f.BodyLen()
	h.Put(f.meta[:RepHeaderLen])
	return f.buffers()
}

// WriteTo writes the frame finished by Request or Reply to w, with one
// writev where w is a TCP connection. The frame is spent afterwards.
func (f *Frame) WriteTo(w io.Writer) (int64, error) {
	if bw, ok := w.(BuffersWriter); ok {
		n, err := bw.WriteBuffers(f.bufs)
		f.bufs = f.bufs[len(f.bufs):]
		return n, err
	}
	return f.bufs.WriteTo(w)
}

// BuffersWriter is a connection that writes a frame's buffers its own way:
// an encrypting one (internal/secure) gathers the small ones into one
// record instead of a record and a system call each.
type BuffersWriter interface {
	WriteBuffers(bufs net.Buffers) (int64, error)
}

// BodyLen is the body length of the frame so far.
func (f *Frame) BodyLen() int64 { return int64(len(f.meta)-f.hdr) + f.pay }

func (f *Frame) buffers() net.Buffers {
	f.flushMeta()
	// WriteTo consumes f.bufs down to an empty slice at the end of its
	// array: rebuild from the array kept in arr.
	f.arr = f.arr[:0]
	for _, s := range f.segs {
		if s.payload != nil {
			f.arr = append(f.arr, s.payload)
		} else {
			f.arr = append(f.arr, f.meta[s.off:s.end])
		}
	}
	f.bufs = f.arr
	return f.bufs
}
