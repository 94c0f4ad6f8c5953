package checkpoint

import (
	"encoding/binary"
	"math"
)

// finiteCheck checks, as a shard file's data section streams past, that
// every F32 tensor (values, optimizer state, table rows) holds only finite
// numbers: a checkpoint never holds an infinity or a NaN (the ps refuses
// an update that would make one), so a file that does was made by hand or
// by a bug, and is damaged when it is verified, set aside like any other
// rather than restored into a model that then trains on NaN. It is
// written the bytes that follow the header, in order, in pieces of any
// size, as keyOrder is.
type finiteCheck struct {
	ranges []finiteRange
	pos    int64 // offset in the data section of the next byte written
	err    error
}

// finiteRange is one F32 tensor: [begin, end) of the data section.
type finiteRange struct {
	name       string
	begin, end int64
	part       [4]byte // the bytes of a value split across writes
	n          int
}

// newFiniteCheck returns the checker for a shard with header hdr, nil when
// it holds no F32 tensor.
func newFiniteCheck(hdr Header) *finiteCheck {
	var c finiteCheck
	for _, e := range hdr.Tensors {
		if e.DType == F32 && e.End > e.Begin {
			c.ranges = append(c.ranges, finiteRange{name: e.Name, begin: e.Begin, end: e.End})
		}
	}
	if len(c.ranges) == 0 {
		return nil
	}
	return &c
}

const expMask = 0x7f800000 // a float32 whose exponent bits are all set is Inf or NaN

func (c *finiteCheck) Write(p []byte) (int, error) {
	n := len(p)
	start, end := c.pos, c.pos+int64(n)
	c.pos = end
	if c.err != nil {
		return n, nil
	}
	for i := range c.ranges {
		r := &c.ranges[i]
		lo, hi := max(start, r.begin), min(end, r.end)
		if lo >= hi {
			continue
		}
		b := p[lo-start : hi-start]
		at := (lo - r.begin) / 4 // the element b starts in
		for len(b) > 0 {
			if r.n == 0 && len(b) >= 4 {
				var j int
				for j = 0; j+4 <= len(b); j += 4 {
					if binary.LittleEndian.Uint32(b[j:])&expMask == expMask {
						c.fail(r, at+int64(j/4), binary.LittleEndian.Uint32(b[j:]))
						return n, nil
					}
				}
				at += int64(j / 4)
				b = b[j:]
				continue
			}
			k := copy(r.part[r.n:], b)
			r.n += k
			b = b[k:]
			if r.n < 4 {
				break
			}
			r.n = 0
			if v := binary.LittleEndian.Uint32(r.part[:]); v&expMask == expMask {
				c.fail(r, at, v)
				return n, nil
			}
			at++
		}
	}
	return n, nil
}

func (c *finiteCheck) fail(r *finiteRange, elem int64, bits uint32) {
	c.err = errorf(ErrFormat, "tensor %q element %d is %v: a checkpoint holds only finite values", r.name, elem, math.Float32frombits(bits))
}

// CheckFinite reports the first F32 value of s that is infinite or NaN, as
// Latest and List check each shard file: a reader of a checkpoint named by
// its step (Load, then ReadShard) calls it before it uses the values. The
// error wraps ErrFormat.
func CheckFinite(s Shard) error {
	for _, t := range s.Tensors {
		if t.DType != F32 {
			continue
		}
		c := finiteCheck{ranges: []finiteRange{{name: t.Name, begin: 0, end: int64(len(t.Data))}}}
		c.Write(t.Data)
		if c.err != nil {
			return c.err
		}
	}
	return nil
}

// teeAll writes to every writer; its Write never fails.
type teeAll []interface{ Write([]byte) (int, error) }

func (t teeAll) Write(p []byte) (int, error) {
	for _, w := range t {
		w.Write(p)
	}
	return len(p), nil
}
