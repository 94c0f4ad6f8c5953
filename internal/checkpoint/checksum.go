package checkpoint

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// A shard file's checksum, as its ShardInfo records it. Checkpoints of
// format version 1 and 2 carry the SHA-256 of the whole file (ShardInfo.
// SHA256); those of ChecksumFormatVersion carry a chunked CRC-32C
// (ShardInfo.Checksum), about ten times cheaper to compute and read back
// and split into pieces that hash independently. It is there to find damage
// (a truncated copy, a flipped bit, a torn write), as SHA-256 was; neither
// is a defence against someone who can write the files.
//
// "crc32c-4m:<hex>": the file cut into 4 MiB pieces (the last may be
// shorter), each piece's CRC-32C (Castagnoli) as 4 big-endian bytes, and
// <hex> the SHA-256 of those bytes in order, 64 lower-case hex digits.
const (
	ChecksumCRC32C4M = "crc32c-4m"
	checksumSHA256   = "sha256"
	crcChunk         = 4 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// chunkCRC is the hash.Hash of ChecksumCRC32C4M: bytes written in any
// pieces give the same sum.
type chunkCRC struct {
	crc  uint32
	fill int    // bytes of the current piece so far
	sums []byte // the finished pieces' CRCs, 4 bytes each
}

func newChunkCRC() *chunkCRC { return &chunkCRC{} }

func (c *chunkCRC) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), crcChunk-c.fill)
		c.crc = crc32.Update(c.crc, castagnoli, p[:k])
		c.fill += k
		p = p[k:]
		if c.fill == crcChunk {
			c.sums = binary.BigEndian.AppendUint32(c.sums, c.crc)
			c.crc, c.fill = 0, 0
		}
	}
	return n, nil
}

func (c *chunkCRC) Sum(b []byte) []byte {
	sums := c.sums
	if c.fill > 0 {
		sums = binary.BigEndian.AppendUint32(sums[:len(sums):len(sums)], c.crc)
	}
	s := sha256.Sum256(sums)
	return append(b, s[:]...)
}

func (c *chunkCRC) Reset()         { *c = chunkCRC{} }
func (c *chunkCRC) Size() int      { return sha256.Size }
func (c *chunkCRC) BlockSize() int { return crcChunk }

// checksum is the kind and hex value of the checksum si records.
func (si ShardInfo) checksum() (kind, sum string) {
	if si.Checksum == "" {
		return checksumSHA256, si.SHA256
	}
	kind, sum, _ = strings.Cut(si.Checksum, ":")
	return kind, sum
}

// checksumName is how messages name a checksum kind.
func checksumName(kind string) string {
	if kind == checksumSHA256 {
		return "SHA-256"
	}
	return "CRC-32C"
}

// validChecksum checks that si records one checksum of a known kind, well
// formed. Errors are reasons.
func (si ShardInfo) validChecksum() error {
	bad := func(format string, args ...any) error { return errorf(ErrInvalid, format, args...) }
	switch {
	case si.SHA256 != "" && si.Checksum != "":
		return bad("%s: both sha256 and checksum are set", si.File)
	case si.Checksum == "":
		if !isHex256(si.SHA256) {
			return bad("%s: sha256 %q is not 64 lower-case hex digits", si.File, si.SHA256)
		}
		return nil
	}
	kind, sum := si.checksum()
	if kind != ChecksumCRC32C4M {
		return bad("%s: checksum %q: unknown kind %q (this program knows %q)", si.File, si.Checksum, kind, ChecksumCRC32C4M)
	}
	if !isHex256(sum) {
		return bad("%s: checksum %q: want %s:<64 lower-case hex digits>", si.File, si.Checksum, kind)
	}
	return nil
}

func isHex256(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 32 && hex.EncodeToString(b) == s
}

// newHash returns the hash that computes si's checksum. si must be valid.
func (si ShardInfo) newHash() hash.Hash {
	if si.Checksum == "" {
		return sha256.New()
	}
	return newChunkCRC()
}

// verifySum compares the sum h computed with si's. Errors are reasons.
func (si ShardInfo) verifySum(h hash.Hash) error {
	kind, want := si.checksum()
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return errorf(ErrChecksum, "checksum mismatch: file has %s %s, manifest says %s", checksumName(kind), got[:12], abbrev(want))
	}
	return nil
}

// usesChunkCRC reports whether any shard of m records a chunked CRC-32C,
// which needs ChecksumFormatVersion.
func (m Manifest) usesChunkCRC() bool {
	for _, s := range m.Shards {
		if s.Checksum != "" {
			return true
		}
	}
	return false
}

// b may be a file's mapping: a page that cannot be read (the file shrank,
// or the disk failed a read) is an error naming where, not a fault that
// ends the process.
func hashAll(h hash.Hash, b []byte, progress func(int64)) (err error) {
	if progress == nil {
		progress = func(int64) {}
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer catchFault(&err, b)
	c, ok := h.(*chunkCRC)
	n := len(b) / crcChunk // whole pieces
	if !ok || c.fill != 0 || len(c.sums) != 0 || n < 2 {
		for len(b) > 0 {
			k := min(len(b), crcChunk)
			h.Write(b[:k])
			progress(int64(k))
			b = b[k:]
		}
		return nil
	}
	sums := make([]uint32, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ferr error
			defer func() {
				if ferr != nil {
					mu.Lock()
					err = cmp.Or(err, ferr)
					mu.Unlock()
				}
			}()
			defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
			defer catchFault(&ferr, b)
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				sums[i] = crc32.Update(0, castagnoli, b[i*crcChunk:(i+1)*crcChunk])
				progress(crcChunk)
			}
		}()
	}
	wg.Wait()
	if err != nil {
		return err
	}
	for _, s := range sums {
		c.sums = binary.BigEndian.AppendUint32(c.sums, s)
	}
	c.Write(b[n*crcChunk:])
	progress(int64(len(b) - n*crcChunk))
	return nil
}

// catchFault, deferred on a goroutine that set debug.SetPanicOnFault,
// turns the panic of a memory fault into *err, naming the offset into b
// where the read failed. Other panics go on.
func catchFault(err *error, b []byte) {
	if r := recover(); r != nil {
		f, ok := r.(interface{ Addr() uintptr })
		if !ok {
			panic(r)
		}
		off := int64(f.Addr()) - int64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
		*err = fmt.Errorf("%w: reading the file at byte %d failed (the file shrank while read, or the disk failed)", ErrSize, off)
	}
}
