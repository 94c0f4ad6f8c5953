package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"unsafe"

	"github.com/paramserv/paramserv/internal/format"
	"github.com/paramserv/paramserv/internal/hugemem"
)

// The data path: push, pull and push+pull as length-prefixed binary frames
// over a plain TCP connection, beside gRPC on the same port (the ps tells
// the two apart by the first four bytes). docs/WIRE.md is the full
// description; the constants and layouts here are the definition.

// Data path constants.
const (
	// DataMagic opens the client's preface and the server's hello. An
	// HTTP/2 connection opens with "PRI " instead.
	DataMagic = "PSDP"
	// DataVersion is the version of the frames below.
	DataVersion = 1
	// DataVersionIncremental is version 1 plus incremental pulls
	// (FlagIncremental). A client that wants them asks for it in its
	// preface; a ps that speaks it answers it, an older one refuses it and
	// the client dials again asking for DataVersion.
	DataVersionIncremental = 2
	// DataVersionDenseIncremental is version 2 plus incremental dense
	// pulls (FlagDenseIncremental, docs/WIRE.md). A ps that refuses it is
	// asked for DataVersionIncremental, then DataVersion.
	DataVersionDenseIncremental = 3
	// PrefaceLen is the client preface: magic, u16 version, then zeros. It
	// is as long as HTTP/2's, so that a ps that only speaks gRPC reads all
	// of it, sees a bad preface and closes the connection at once (the
	// client then uses gRPC) instead of waiting for more bytes.
	PrefaceLen = 24
	// HelloLen is the server's answer to the preface: magic, u16 version,
	// u16 status (HelloOK or HelloBadVersion), u32 cache slots, u32 most
	// keys per slot.
	HelloLen = 16
	// ReqHeaderLen and RepHeaderLen are the fixed headers of a request and
	// a reply.
	ReqHeaderLen = 40
	RepHeaderLen = 32
	// MaxBody bounds the bytes after a header (as gRPC's message limit).
	MaxBody = 1 << 30
	// MaxName bounds a variable or table name.
	MaxName = 1024
	// MaxSections bounds the sections of each kind in one frame.
	MaxSections = 4096
	// MaxErrorMessage bounds the message of an error reply.
	MaxErrorMessage = 64 << 10
	// CacheSlots is the number of key sets a connection can keep on the
	// ps, and MaxCachedKeys the most keys one may hold.
	CacheSlots    = 8
	MaxCachedKeys = 1 << 22
	// NoSlot, as the argument of KeysInline, keeps the keys in no slot.
	NoSlot = 0xff
)

// Hello statuses.
const (
	HelloOK         = 0
	HelloBadVersion = 1
)

// Op is what a request does; the bits combine.
type Op uint8

// The ops.
const (
	OpPush     Op = 1
	OpPull     Op = 2
	OpPushPull Op = OpPush | OpPull
)

// Push reports whether o pushes.
func (o Op) Push() bool { return o&OpPush != 0 }

// Pull reports whether o pulls.
func (o Op) Pull() bool { return o&OpPull != 0 }

// KeyMode says where a sparse section's keys are.
type KeyMode uint8

// The key modes.
const (
	// KeysInline: the keys follow in the section; its argument is the
	// cache slot to keep them in for later requests, or NoSlot.
	KeysInline KeyMode = 0
	// KeysCached: the keys kept in the slot named by the argument.
	KeysCached KeyMode = 1
	// KeysAsPush: (pull sections only) the keys of the push section of
	// this request named by the argument.
	KeysAsPush KeyMode = 2
)

// Request header flags.
const (
	flagPullDense   = 1 // the pull reads every dense variable of the ps
	flagIncremental = 2 // the sparse pull sections are incremental (FlagIncremental)
	flagDenseIncr   = 4 // the dense pull is incremental (DenseIncremental, version 3)
)

// DenseBlock is the number of float32 values of a dense block, the unit of
// incremental dense pulls (format.DenseBlock, which the ps's versions use).
const DenseBlock = format.DenseBlock

// DenseBlocks is the number of blocks of a variable of n values.
func DenseBlocks(n int) int { return format.DenseBlocks(n) }

// MaxDenseBlocks bounds the blocks a request may name (MaxBody's worth of
// values).
const MaxDenseBlocks = MaxBody / 4 / DenseBlock

// DenseHeld is the dense part of an incremental dense pull (version 3):
// the ps incarnation and the version at which the worker holds every
// dense block of the ps (Since 0: none held), and the number of blocks
// it counts, which must be the ps's.
type DenseHeld struct {
	Incarnation, Since uint64
	Blocks             int
}

// Reply header flags.
const (
	flagError   = 1 // the body is a status code and a message
	flagDropped = 2 // the push was dropped (stale or duplicate)
)

// FrameError is a malformed frame: the peer does not speak the protocol,
// and the connection cannot go on.
type FrameError struct{ Msg string }

func (e *FrameError) Error() string { return "data path: malformed frame: " + e.Msg }

func frameErr(format string, args ...any) error {
	return &FrameError{Msg: fmt.Sprintf(format, args...)}
}

// Preface returns the client's preface.
func Preface() []byte { return PrefaceVersion(DataVersion) }

// PrefaceVersion returns the client's preface asking for version v.
func PrefaceVersion(v int) []byte {
	b := make([]byte, PrefaceLen)
	copy(b, DataMagic)
	binary.LittleEndian.PutUint16(b[4:], uint16(v))
	return b
}

// CheckPreface checks a client preface and returns the version it asks for.
func CheckPreface(b []byte) (version int, err error) {
	if len(b) != PrefaceLen || string(b[:4]) != DataMagic {
		return 0, frameErr("preface %q does not start with %q", b, DataMagic)
	}
	for _, x := range b[6:] {
		if x != 0 {
			return 0, frameErr("preface %q: reserved bytes are not zero", b)
		}
	}
	return int(binary.LittleEndian.Uint16(b[4:])), nil
}

// Hello is the server's answer to a preface.
type Hello struct {
	Version, Status      int
	Slots, MaxCachedKeys int
}

// Put writes h into b (HelloLen bytes).
func (h Hello) Put(b []byte) {
	copy(b, DataMagic)
	binary.LittleEndian.PutUint16(b[4:], uint16(h.Version))
	binary.LittleEndian.PutUint16(b[6:], uint16(h.Status))
	binary.LittleEndian.PutUint32(b[8:], uint32(h.Slots))
	binary.LittleEndian.PutUint32(b[12:], uint32(h.MaxCachedKeys))
}

// ParseHello reads a server hello.
func ParseHello(b []byte) (Hello, error) {
	if len(b) != HelloLen || string(b[:4]) != DataMagic {
		return Hello{}, frameErr("hello %q does not start with %q", b, DataMagic)
	}
	return Hello{
		Version:       int(binary.LittleEndian.Uint16(b[4:])),
		Status:        int(binary.LittleEndian.Uint16(b[6:])),
		Slots:         int(binary.LittleEndian.Uint32(b[8:])),
		MaxCachedKeys: int(binary.LittleEndian.Uint32(b[12:])),
	}, nil
}

// ReqHeader is the fixed header of a request:
//
//	0  u8  op                  16 i64 step (push: computed at)
//	1  u8  flags (1: pull dense) 24 i64 min_step (pull)
//	2  u16 dense push sections 32 u64 body bytes
//	4  u16 sparse push sections
//	6  u16 sparse pull sections
//	8  i32 worker
//	12 u32 reserved, 0
type ReqHeader struct {
	Op        Op
	PullDense bool
	// Incremental: every sparse pull section names the version of the rows
	// the worker holds, and the reply carries only the rows it needs
	// (docs/WIRE.md, incremental pulls). Needs DataVersionIncremental.
	Incremental bool
	// DenseIncremental: the pull of dense values names the version of the
	// blocks the worker holds (Request.DenseHeld), and the reply carries
	// only those changed since. Needs PullDense and
	// DataVersionDenseIncremental.
	DenseIncremental              bool
	Dense, SparsePush, SparsePull int
	Worker                        int32
	Step, MinStep                 int64
	Body                          int64
}

// Put writes h into b (ReqHeaderLen bytes).
func (h ReqHeader) Put(b []byte) {
	b = b[:ReqHeaderLen]
	b[0] = byte(h.Op)
	b[1] = 0
	if h.PullDense {
		b[1] = flagPullDense
	}
	if h.Incremental {
		b[1] |= flagIncremental
	}
	if h.DenseIncremental {
		b[1] |= flagDenseIncr
	}
	binary.LittleEndian.PutUint16(b[2:], uint16(h.Dense))
	binary.LittleEndian.PutUint16(b[4:], uint16(h.SparsePush))
	binary.LittleEndian.PutUint16(b[6:], uint16(h.SparsePull))
	binary.LittleEndian.PutUint32(b[8:], uint32(h.Worker))
	binary.LittleEndian.PutUint32(b[12:], 0)
	binary.LittleEndian.PutUint64(b[16:], uint64(h.Step))
	binary.LittleEndian.PutUint64(b[24:], uint64(h.MinStep))
	binary.LittleEndian.PutUint64(b[32:], uint64(h.Body))
}

// ParseReqHeader reads and checks a request header.
func ParseReqHeader(b []byte) (ReqHeader, error) {
	b = b[:ReqHeaderLen]
	h := ReqHeader{
		Op:               Op(b[0]),
		PullDense:        b[1]&flagPullDense != 0,
		Incremental:      b[1]&flagIncremental != 0,
		DenseIncremental: b[1]&flagDenseIncr != 0,
		Dense:            int(binary.LittleEndian.Uint16(b[2:])),
		SparsePush:       int(binary.LittleEndian.Uint16(b[4:])),
		SparsePull:       int(binary.LittleEndian.Uint16(b[6:])),
		Worker:           int32(binary.LittleEndian.Uint32(b[8:])),
		Step:             int64(binary.LittleEndian.Uint64(b[16:])),
		MinStep:          int64(binary.LittleEndian.Uint64(b[24:])),
	}
	body := binary.LittleEndian.Uint64(b[32:])
	switch {
	case h.Op != OpPush && h.Op != OpPull && h.Op != OpPushPull:
		return h, frameErr("unknown op %d (want 1 push, 2 pull, 3 push+pull)", b[0])
	case b[1]&^(flagPullDense|flagIncremental|flagDenseIncr) != 0 || binary.LittleEndian.Uint32(b[12:]) != 0:
		return h, frameErr("unknown flags %#x or reserved bits set", b[1])
	case h.Dense > MaxSections || h.SparsePush > MaxSections || h.SparsePull > MaxSections:
		return h, frameErr("%d dense, %d sparse push and %d sparse pull sections: at most %d of each", h.Dense, h.SparsePush, h.SparsePull, MaxSections)
	case !h.Op.Push() && (h.Dense > 0 || h.SparsePush > 0):
		return h, frameErr("a pull carries %d dense and %d sparse push sections", h.Dense, h.SparsePush)
	case !h.Op.Pull() && (h.PullDense || h.SparsePull > 0 || h.Incremental):
		return h, frameErr("a push asks to pull")
	case h.DenseIncremental && !h.PullDense:
		return h, frameErr("an incremental dense pull that pulls no dense values")
	case body > MaxBody:
		return h, frameErr("body of %d bytes is over the limit of %d", body, MaxBody)
	}
	h.Body = int64(body)
	return h, nil
}

// RepHeader is the fixed header of a reply:
//
//	0 u8  status (0 ok, 1 error)  8  i64 global step
//	1 u8  flags (1: push dropped) 16 u64 body bytes
//	2 u16 dense sections          24 u64 the ps's incarnation (0 in an error reply)
//	4 u16 sparse sections
//	6 u16 reserved, 0
type RepHeader struct {
	Err, Dropped  bool
	Dense, Sparse int
	Step          int64
	Body          int64
	// Incarnation changes when the ps restarts or restores a checkpoint.
	Incarnation uint64
}

// Put writes h into b (RepHeaderLen bytes).
func (h RepHeader) Put(b []byte) {
	b = b[:RepHeaderLen]
	b[0], b[1] = 0, 0
	if h.Err {
		b[0] = 1
	}
	if h.Dropped {
		b[1] = flagDropped
	}
	binary.LittleEndian.PutUint16(b[2:], uint16(h.Dense))
	binary.LittleEndian.PutUint16(b[4:], uint16(h.Sparse))
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint64(b[8:], uint64(h.Step))
	binary.LittleEndian.PutUint64(b[16:], uint64(h.Body))
	binary.LittleEndian.PutUint64(b[24:], h.Incarnation)
}

// ParseRepHeader reads and checks a reply header.
func ParseRepHeader(b []byte) (RepHeader, error) {
	b = b[:RepHeaderLen]
	h := RepHeader{
		Err:         b[0] == 1,
		Dropped:     b[1]&flagDropped != 0,
		Dense:       int(binary.LittleEndian.Uint16(b[2:])),
		Sparse:      int(binary.LittleEndian.Uint16(b[4:])),
		Step:        int64(binary.LittleEndian.Uint64(b[8:])),
		Incarnation: binary.LittleEndian.Uint64(b[24:]),
	}
	body := binary.LittleEndian.Uint64(b[16:])
	switch {
	case b[0] > 1 || b[1]&^flagDropped != 0 || binary.LittleEndian.Uint16(b[6:]) != 0:
		return h, frameErr("reply status %d, flags %#x: unknown", b[0], b[1])
	case h.Dense > MaxSections || h.Sparse > MaxSections:
		return h, frameErr("reply of %d dense and %d sparse sections: at most %d of each", h.Dense, h.Sparse, MaxSections)
	case body > MaxBody:
		return h, frameErr("reply body of %d bytes is over the limit of %d", body, MaxBody)
	case h.Err && (body < 4 || body > 4+MaxErrorMessage):
		return h, frameErr("error reply of %d bytes (want 4 to %d)", body, 4+MaxErrorMessage)
	}
	h.Body = int64(body)
	return h, nil
}

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
	if err := r.take(4*n, what); err != nil {
		return buf, -1, err
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
				if bad < 0 {
					if j := FirstNonFinite(part); j >= 0 {
						bad = done + checked + j
					}
				}
				checked = whole
			}
			switch {
			case got == len(b):
			case err != nil:
				return buf, -1, noEOF(err)
			case m == 0:
				if empty++; empty >= 100 {
					return buf, -1, io.ErrNoProgress
				}
			}
		}
		buf = buf[:len(buf)+k]
		done += k
	}
	return buf, bad, nil
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

// DenseSection is one variable's values: in a request, a push's gradient;
// in a reply, the values pulled. Layout: u16 name length, name, u32 count,
// count float32.
type DenseSection struct {
	Name []byte
	Data []float32
	// Bad is, in a request, the index of the first NaN or ±Inf in Data, or
	// -1.
	Bad int
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
	if _, err := io.ReadFull(br, r.hdr[:]); err != nil {
		return err // io.EOF only if the connection ended between frames
	}
	h, err := ParseReqHeader(r.hdr[:])
	if err != nil {
		return err
	}
	r.ReqHeader = h
	r.names, r.floats, r.keys, r.offs = r.names[:0], r.floats[:0], r.keys[:0], r.offs[:0]
	r.body = BodyReader{R: br, Left: h.Body}
	body := &r.body
	for range h.Dense {
		o := sectionOffs{name: len(r.names)}
		if r.names, err = body.Name(r.names, "dense section"); err != nil {
			return err
		}
		o.nameEnd, o.floats = len(r.names), len(r.floats)
		n, err := body.Uint32("dense section count")
		if err != nil {
			return err
		}
		if r.floats, o.bad, err = body.FloatsChecked(r.floats, n, "dense section"); err != nil {
			return err
		}
		o.floatsE = len(r.floats)
		r.offs = append(r.offs, o)
	}
	for i := range h.SparsePush + h.SparsePull {
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
		switch KeyMode(mode) {
		case KeysInline:
			if arg != NoSlot && arg >= CacheSlots {
				return frameErr("sparse section %d keeps its keys in slot %d, there are %d", i, arg, CacheSlots)
			}
			if arg != NoSlot && nkeys > MaxCachedKeys {
				return frameErr("sparse section %d keeps %d keys in a slot, at most %d", i, nkeys, MaxCachedKeys)
			}
			o.keys = len(r.keys)
			if r.keys, err = body.Keys(r.keys, nkeys, "keys"); err != nil {
				return err
			}
			o.keysEnd = len(r.keys)
		case KeysCached:
			if arg >= CacheSlots {
				return frameErr("sparse section %d names slot %d, there are %d", i, arg, CacheSlots)
			}
		case KeysAsPush:
			if push || arg >= h.SparsePush {
				return frameErr("sparse section %d takes the keys of push section %d, of %d", i, arg, h.SparsePush)
			}
		default:
			return frameErr("sparse section %d: unknown key mode %d", i, mode)
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
			if r.floats, o.bad, err = body.FloatsChecked(r.floats, n, "values"); err != nil {
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
	}
	r.DenseHeld = DenseHeld{}
	if h.DenseIncremental {
		d := &r.DenseHeld
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
	}
	if body.Left != 0 {
		return frameErr("%d bytes after the last section", body.Left)
	}
	// The arenas have their final size: make the views.
	r.Dense = r.Dense[:0]
	for i := range h.Dense {
		o := r.offs[i]
		r.Dense = append(r.Dense, DenseSection{Name: r.names[o.name:o.nameEnd], Data: r.floats[o.floats:o.floatsE], Bad: o.bad})
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
		sec.Bad = o.bad
		sec.Incarnation, sec.Since, sec.Lack = o.inc, o.since, nil
		if o.since != 0 {
			sec.Lack = r.keys[o.lack:o.lackEnd]
		}
	}
	return nil
}

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

// ErrorBody makes the frame's body a status code and a message (cut to
// MaxErrorMessage bytes).
func (f *Frame) ErrorBody(code uint32, msg string) {
	if len(msg) > MaxErrorMessage {
		msg = msg[:MaxErrorMessage]
	}
	f.u32(int(code))
	f.meta = append(f.meta, msg...)
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

// ReadErrorBody reads an error reply's body: a status code (never 0, gRPC's
// OK) and a message.
func ReadErrorBody(r *BodyReader) (code uint32, msg string, err error) {
	c, err := r.Uint32("error code")
	if err != nil {
		return 0, "", err
	}
	if c == 0 {
		// gRPC's OK: an error that would read as a success.
		return 0, "", frameErr("error reply with status code 0 (OK)")
	}
	b, err := r.Bytes(nil, int(r.Left), "error message")
	return uint32(c), string(b), err
}
