package checkpoint

import (
	"hash/crc32"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/paramserv/paramserv/internal/vfs"
)

// writePieces writes the safetensors file of tensors (some made by Fill)
// and meta to f, in the file's crcChunk pieces: the pieces are made (their
// bytes copied or filled, and their CRC-32C computed) on every core, a few
// ahead of the one being written, and the file is written in order as
// they come. Where f is an operating system file that takes O_DIRECT the
// pieces go from their buffers to the disk, with no copy into the page
// cache (direct.go; the copy was most of a save's CPU, and the fsync
// after it waited for the whole file); elsewhere every writebackEvery
// bytes it asks the kernel to start writing what came before to the disk,
// so that the fsync that follows waits for the last of it only. The file's
// bytes are the same either way. It returns the file's checksum and size.
func writePieces(f vfs.File, tensors []Tensor, meta map[string]string) (*chunkCRC, int64, error) {
	hdr, tensors, err := encodePlan(tensors, meta)
	if err != nil {
		return nil, 0, err
	}
	type segment struct {
		at, size int64
		data     []byte
		fill     func([]byte, int64)
	}
	segs := []segment{{at: 0, size: int64(len(hdr)), data: hdr}}
	size := int64(len(hdr))
	for _, t := range tensors {
		segs = append(segs, segment{at: size, size: t.ByteSize(), data: t.Data, fill: t.Fill})
		size += t.ByteSize()
	}
	// make writes bytes [at, at+len(b)) of the file into b.
	makeAt := func(b []byte, at int64) {
		end := at + int64(len(b))
		for _, sg := range segs {
			lo, hi := max(at, sg.at), min(end, sg.at+sg.size)
			if lo >= hi {
				continue
			}
			dst := b[lo-at : hi-at]
			if sg.fill != nil {
				sg.fill(dst, lo-sg.at)
			} else {
				copy(dst, sg.data[lo-sg.at:hi-sg.at])
			}
		}
	}
	n := int((size + crcChunk - 1) / crcChunk)
	workers := max(1, min(runtime.GOMAXPROCS(0), n))
	type piece struct {
		b   []byte
		sum uint32
	}
	ready := make([]chan piece, n)
	for i := range ready {
		ready[i] = make(chan piece, 1)
	}
	// A worker takes a buffer before it takes the next piece, so the
	// piece the writer waits for always has one.
	bufs := min(n, 2*workers+2)
	out := startDirect(f)
	free := make(chan []byte, bufs)
	for range bufs {
		free <- alignedBuffer(crcChunk)
	}
	quit := make(chan struct{})
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var b []byte
				select {
				case b = <-free:
				case <-quit:
					return
				}
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				at := i * crcChunk
				b = b[:min(crcChunk, size-at)]
				makeAt(b, at)
				ready[i] <- piece{b, crc32.Update(0, castagnoli, b)}
			}
		}()
	}
	defer wg.Wait()
	defer close(quit)
	h := newChunkCRC()
	var written, started int64
	for i := range n {
		p := <-ready[i]
		k, err := out.Write(p.b)
		written += int64(k)
		if err == nil && k < len(p.b) {
			err = io.ErrShortWrite
		}
		if err != nil {
			return nil, written, err
		}
		if len(p.b) == crcChunk {
			h.sums = append(h.sums, byte(p.sum>>24), byte(p.sum>>16), byte(p.sum>>8), byte(p.sum))
		} else {
			h.crc, h.fill = p.sum, len(p.b)
		}
		free <- p.b[:cap(p.b)]
		if !out.on && written-started >= writebackEvery {
			startWriteback(f, started, written-started)
			started = written
		}
	}
	return h, written, nil
}

// writebackEvery is how many bytes writePieces writes between asking the
// kernel to start writing them to the disk.
const writebackEvery = 32 << 20
