package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"unsafe"

	"github.com/paramserv/paramserv/internal/format"
	"github.com/paramserv/paramserv/internal/hugemem"
)

// BodyReader reads the body of one frame, never past its declared length.
type BodyReader struct {
	R    *bufio.Reader
	Left int64 // bytes of the body not read yet
	tmp  [8]byte
}

func (r *BodyReader) take(n int64, what string) error {
	if n > r.Left {
		return frameErr("%s needs %d bytes, the body has %d left", what, n, r.Left)
	}
	r.Left -= n
	return nil
}

func (r *BodyReader) fixed(n int, what string) ([]byte, error) {
	if err := r.take(int64(n), what); err != nil {
		return nil, err
	}
	b := r.tmp[:n]
	_, err := io.ReadFull(r.R, b)
	return b, noEOF(err)
}

// Uint8, Uint16 and Uint32 read little-endian integers.
func (r *BodyReader) Uint8(what string) (int, error) {
	b, err := r.fixed(1, what)
	if err != nil {
		return 0, err
	}
	return int(b[0]), nil
}

// Uint16 reads a little-endian uint16.
func (r *BodyReader) Uint16(what string) (int, error) {
	b, err := r.fixed(2, what)
	if err != nil {
		return 0, err
	}
	return int(binary.LittleEndian.Uint16(b)), nil
}

// Uint64 reads a little-endian uint64.
func (r *BodyReader) Uint64(what string) (uint64, error) {
	b, err := r.fixed(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// Uint32 reads a little-endian uint32.
func (r *BodyReader) Uint32(what string) (int64, error) {
	b, err := r.fixed(4, what)
	if err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint32(b)), nil
}

// Name reads a u16 length and that many bytes (1..MaxName), appended to
// buf; what names the thing named, for errors.
func (r *BodyReader) Name(buf []byte, what string) ([]byte, error) {
	n, err := r.Uint16(what)
	if err != nil {
		return buf, err
	}
	if n < 1 || n > MaxName {
		return buf, frameErr("%s name of %d bytes (want 1 to %d)", what, n, MaxName)
	}
	return r.Bytes(buf, n, what)
}

// Bytes appends n bytes to buf.
func (r *BodyReader) Bytes(buf []byte, n int, what string) ([]byte, error) {
	if err := r.take(int64(n), what); err != nil {
		return buf, err
	}
	buf = slices.Grow(buf, n)
	_, err := io.ReadFull(r.R, buf[len(buf):len(buf)+n])
	return buf[:len(buf)+n], noEOF(err)
}

// readChunk bounds how much a frame makes its reader allocate ahead of the
// bytes actually received: keys are read this many bytes at a time, values
// into room of at least checkChunk (FloatsChecked), and buffers at most
// double as they grow, so a frame that claims a gigabyte and sends a
// kilobyte costs about a megabyte.
const readChunk = 1 << 20

// checkChunk is the fewest values FloatsChecked grows its buffer by: a
// buffer already as large as the section (a connection's request buffer,
// reused) is read into whole.
const checkChunk = 64 << 10

// FloatsChecked appends n little-endian float32 values to buf, reading
// them straight into buf's memory, and finds the first NaN or ±Inf among
// them; bad is its index among the n values, or -1. Each read asks for
// all the room left (as a plain io.ReadFull of the section would, so that
// a section takes as few system calls as the socket's arrivals allow: a
// 1 MiB push+pull took 5.6 reads a request on the ps with reads of
// checkChunk values, about 3 with these; the bare socket baseline 2.6), and
// the values each read brought are checked at once, while the copy has
// just put them in the core's cache. The buffer grows at most twofold at a
// time and by at least checkChunk values, so a frame that claims a
// gigabyte and sends a kilobyte costs about a megabyte.
func (r *BodyReader) FloatsChecked(buf []float32, n int64, what string) (out []float32, bad int, err error) {
	out, bad, _, err = r.FloatsMax(buf, n, what)
	return out, bad, err
}

// FloatsMax is FloatsChecked that also returns the largest |value| read,
// as float32 bits (format.MaxAbsBits, found in the same pass as the check:
// the bound that lets the ps skip trying an update on copies needs it).
func (r *BodyReader) FloatsMax(buf []float32, n int64, what string) (out []float32, bad int, maxBits uint32, err error) {
	if err := r.take(4*n, what); err != nil {
		return buf, -1, 0, err
	}
	bad = -1
	for done := 0; int64(done) < n; {
		k := int(min(n-int64(done), max(checkChunk, int64(cap(buf)-len(buf)))))
		buf = hugemem.Grow(buf, k)
		dst := buf[len(buf) : len(buf)+k]
		b := rawBytes32(dst)
		got, checked, empty := 0, 0, 0
		for got < len(b) {
			m, err := r.R.Read(b[got:])
			got += m
			if whole := got / 4; whole > checked {
				part := dst[checked:whole]
				fromLE32(part)
				mx := format.MaxAbsBits(part)
				if mx >= format.NotFiniteBits && bad < 0 {
					bad = done + checked + FirstNonFinite(part)
				}
				maxBits = max(maxBits, mx)
				checked = whole
			}
			switch {
			case got == len(b):
			case err != nil:
				return buf, -1, 0, noEOF(err)
			case m == 0:
				if empty++; empty >= 100 {
					return buf, -1, 0, io.ErrNoProgress
				}
			}
		}
		buf = buf[:len(buf)+k]
		done += k
	}
	return buf, bad, maxBits, nil
}

// FloatsInto reads len(dst) little-endian float32 values into dst.
func (r *BodyReader) FloatsInto(dst []float32, what string) error {
	if err := r.take(4*int64(len(dst)), what); err != nil {
		return err
	}
	if _, err := io.ReadFull(r.R, rawBytes32(dst)); err != nil {
		return noEOF(err)
	}
	fromLE32(dst)
	return nil
}

// Keys appends n little-endian uint64 keys to buf.
func (r *BodyReader) Keys(buf []uint64, n int64, what string) ([]uint64, error) {
	if err := r.take(8*n, what); err != nil {
		return buf, err
	}
	for n > 0 {
		k := int(min(n, readChunk/8))
		buf = slices.Grow(buf, k)
		dst := buf[len(buf) : len(buf)+k]
		if _, err := io.ReadFull(r.R, rawBytes64(dst)); err != nil {
			return buf, noEOF(err)
		}
		fromLE64(dst)
		buf = buf[:len(buf)+k]
		n -= int64(k)
	}
	return buf, nil
}

// Skip discards what is left of the body.
func (r *BodyReader) Skip() error {
	n, err := r.R.Discard(int(r.Left))
	r.Left -= int64(n)
	return noEOF(err)
}

// noEOF turns an EOF inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// rawBytes32 and rawBytes64 view a slice's memory as bytes, whatever the
// machine's byte order; fromLE32 and fromLE64 then fix the order in place.
func rawBytes32(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

func rawBytes64(k []uint64) []byte {
	if len(k) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&k[0])), 8*len(k))
}

func fromLE32(f []float32) {
	if littleEndian {
		return
	}
	b := rawBytes32(f)
	for i := range f {
		*(*uint32)(unsafe.Pointer(&f[i])) = binary.LittleEndian.Uint32(b[4*i:])
	}
}

func fromLE64(k []uint64) {
	if littleEndian {
		return
	}
	b := rawBytes64(k)
	for i := range k {
		k[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
}
