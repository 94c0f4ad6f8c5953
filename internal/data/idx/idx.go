// Package idx reads IDX files, the format of the MNIST and Fashion-MNIST
// datasets: a four-byte magic number 0x00 0x00 <type> <ndims>, ndims
// big-endian uint32 dimension sizes, then the values in row-major order. Only
// the unsigned-byte type (0x08) is supported. A file may be gzip-compressed;
// Read tells by its first two bytes (0x1f 0x8b).
//
// Reading is bounded: the header's dimensions fix the size of the data, which
// must not exceed MaxDataBytes, and the data that follows must be exactly that
// long. A short file, trailing bytes, a wrong magic number or an unsupported
// type is an *Error that names the file and says what was expected and what
// was found; errors.Is matches it against ErrTruncated, ErrTrailing,
// ErrMagic, ErrType, ErrTooLarge or ErrRead.
//
// The functions here hold no state and are safe for concurrent use.
package idx

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// TypeUint8 is the IDX type code of unsigned bytes, the only one supported.
const TypeUint8 = 0x08

// MaxDims is the largest number of dimensions accepted.
const MaxDims = 8

// MaxDataBytes bounds the size of the data a header may announce (1 GiB; the
// MNIST training images are 47 MB).
const MaxDataBytes = 1 << 30

// Kinds of failure, matched with errors.Is against an *Error.
var (
	ErrMagic     = errors.New("idx: bad magic number")
	ErrType      = errors.New("idx: unsupported element type")
	ErrTooLarge  = errors.New("idx: data too large")
	ErrTruncated = errors.New("idx: truncated")
	ErrTrailing  = errors.New("idx: trailing data")
	ErrRead      = errors.New("idx: read error") // I/O or gzip; Error.Err says which
)

// Error is a malformed or unreadable IDX file.
type Error struct {
	File   string // the name given to Read, or the path given to ReadFile
	Kind   error  // one of the Err* sentinels
	Detail string // what was expected and what was found
	Err    error  // the underlying I/O or gzip error, if any
}

func (e *Error) Error() string {
	s := e.File + ": " + e.Detail
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the kind and the underlying error, so errors.Is matches both.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// File is a decoded IDX file of unsigned bytes.
type File struct {
	Dims []int  // dimension sizes, outermost first
	Data []byte // the values, row-major; len(Data) is the product of Dims
}

// ReadFile reads the IDX file at path, gzipped or not. Errors name path.
func ReadFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // *PathError already names the file
	}
	defer f.Close()
	return Read(f, path)
}

// Read reads an IDX file from r, gzipped or not. name is used in errors
// only. Read consumes r to its end, to check that nothing follows the data.
func Read(r io.Reader, name string) (*File, error) {
	br := bufio.NewReader(r)
	if b, err := br.Peek(2); err == nil && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, &Error{File: name, Kind: ErrRead, Detail: "bad gzip header", Err: err}
		}
		defer zr.Close()
		return read(zr, name, " (after gunzip)")
	}
	return read(br, name, "")
}

// read decodes the IDX stream r; where says what r is, for errors.
func read(r io.Reader, name, where string) (*File, error) {
	var magic [4]byte
	if n, err := io.ReadFull(r, magic[:]); err != nil {
		return nil, readErr(name, err, fmt.Sprintf(
			"truncated: want a 4-byte IDX magic number, found %d bytes%s", n, where))
	}
	m := binary.BigEndian.Uint32(magic[:])
	if magic[0] != 0 || magic[1] != 0 || magic[3] == 0 || magic[3] > MaxDims {
		return nil, &Error{File: name, Kind: ErrMagic, Detail: fmt.Sprintf(
			"not an IDX file: magic 0x%08x%s, want 0x0000TTNN (two zero bytes, type TT = 0x08 for unsigned bytes, NN = 1..%d dimensions; MNIST images have 0x00000803, labels 0x00000801)",
			m, where, MaxDims)}
	}
	if magic[2] != TypeUint8 {
		return nil, &Error{File: name, Kind: ErrType, Detail: fmt.Sprintf(
			"unsupported element type 0x%02x (%s) in magic 0x%08x: only unsigned bytes (0x08) are supported",
			magic[2], typeName(magic[2]), m)}
	}
	ndims := int(magic[3])
	hdr := make([]byte, 4*ndims)
	if n, err := io.ReadFull(r, hdr); err != nil {
		return nil, readErr(name, err, fmt.Sprintf(
			"truncated: magic says %d dimensions (%d header bytes), found %d%s", ndims, len(hdr), n, where))
	}
	dims := make([]int, ndims)
	size := int64(1)
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(hdr[4*i:]))
		size *= int64(dims[i]) // below 2^30 · 2^32 < 2^63: checked each time
		if size > MaxDataBytes {
			return nil, &Error{File: name, Kind: ErrTooLarge, Detail: fmt.Sprintf(
				"header announces %s values, more than the limit of %d bytes", dimString(dims[:i+1]), MaxDataBytes)}
		}
	}
	// Read at most size+1 bytes, the buffer growing only as data comes: a
	// lying header cannot make us allocate what is not there.
	data, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil || int64(len(data)) < size {
		return nil, readErr(name, err, fmt.Sprintf(
			"truncated: header says %s = %d bytes of data, found %d%s", dimString(dims), size, len(data), where))
	}
	if int64(len(data)) > size {
		extra, err := io.Copy(io.Discard, io.LimitReader(r, MaxDataBytes))
		more := ""
		if extra == MaxDataBytes {
			more = "at least "
		}
		return nil, readErr(name, err, fmt.Sprintf(
			"trailing data: header says %s = %d bytes of data, found %s%d%s",
			dimString(dims), size, more, int64(len(data))+extra, where), ErrTrailing)
	}
	return &File{Dims: dims, Data: data}, nil
}

// readErr builds the error for a short or failed read. A plain end of input
// is kind (ErrTruncated unless given); any other error (a damaged gzip
// stream, a failing disk) is ErrRead and is kept.
func readErr(name string, err error, detail string, kind ...error) *Error {
	e := &Error{File: name, Kind: ErrTruncated, Detail: detail}
	if len(kind) > 0 {
		e.Kind = kind[0]
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		e.Kind, e.Err = ErrRead, err
	}
	return e
}

func dimString(dims []int) string {
	s := make([]string, len(dims))
	for i, d := range dims {
		s[i] = strconv.Itoa(d)
	}
	return strings.Join(s, "×")
}

func typeName(t byte) string {
	switch t {
	case 0x08:
		return "unsigned byte"
	case 0x09:
		return "signed byte"
	case 0x0b:
		return "short"
	case 0x0c:
		return "int"
	case 0x0d:
		return "float"
	case 0x0e:
		return "double"
	}
	return "unknown"
}
