package checkpoint

import (
	"bytes"
	"hash"
	"io"
	"sync"
)

// hashChunk is the piece of a file hashed at a time, on another goroutine
// than the one reading or writing it, so that checksums cost no time of the
// disk's when there is a core to spare.
const hashChunk = 4 << 20

// readHashed reads r to its end, feeding h on another goroutine as the
// bytes arrive. With size >= 0 it returns the bytes, which must be exactly
// size (else an ErrSize error); with size < 0 it only hashes them, through
// a few reused buffers.
func readHashed(r io.Reader, h hash.Hash, size int64) ([]byte, error) {
	full := make(chan []byte, 4)
	free := make(chan []byte, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range full {
			h.Write(b)
			if size < 0 {
				free <- b[:cap(b)]
			}
		}
	}()
	var data []byte
	if size >= 0 {
		data = make([]byte, size)
	} else {
		for range 3 {
			free <- make([]byte, hashChunk)
		}
	}
	var off int64
	var err error
	for {
		var b []byte
		if size >= 0 {
			if off == size {
				break
			}
			b = data[off:min(off+hashChunk, size):min(off+hashChunk, size)]
		} else {
			b = <-free
		}
		n, rerr := io.ReadFull(r, b)
		if n > 0 {
			full <- b[:n]
			off += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			if size >= 0 {
				err = errorf(ErrSize, "truncated: read %d bytes of %d", off, size)
			}
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
	}
	close(full)
	<-done
	if err != nil {
		return nil, err
	}
	if size >= 0 {
		var one [1]byte
		if k, _ := io.ReadFull(r, one[:]); k != 0 {
			return nil, errorf(ErrSize, "the file is longer than the %d bytes it was said to be", size)
		}
	}
	return data, nil
}

// decodeBytes parses a whole safetensors file held in b; the tensors' Data
// are slices of b.
func decodeBytes(b []byte) (Header, []Tensor, error) {
	h, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return Header{}, nil, err
	}
	tensors := make([]Tensor, len(h.Tensors))
	for i, e := range h.Tensors {
		lo, hi := h.DataStart+e.Begin, h.DataStart+e.End
		tensors[i] = Tensor{Name: e.Name, DType: e.DType, Shape: e.Shape, Data: b[lo:hi:hi]}
	}
	return h, tensors, nil
}

// hashingWriter writes to w and feeds h, hashing large writes on another
// goroutine while w writes them (the bytes are only read by both).
type hashingWriter struct {
	w io.Writer
	h hash.Hash
}

func (hw hashingWriter) Write(p []byte) (int, error) {
	if len(p) < hashChunk {
		n, err := hw.w.Write(p)
		hw.h.Write(p[:n])
		return n, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		hw.h.Write(p)
	}()
	n, err := hw.w.Write(p)
	wg.Wait()
	if n < len(p) && err == nil {
		err = io.ErrShortWrite
	}
	return n, err
}
