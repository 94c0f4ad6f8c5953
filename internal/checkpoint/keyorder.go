package checkpoint

import (
	"encoding/binary"
	"hash"
)

// keyOrder checks, as a shard file's data section streams past, that the
// keys of every sparse table it holds are strictly ascending, as every
// writer writes them and a restore requires: a file whose checksum holds
// but whose keys do not (a writer's bug, or a file made by hand) is then
// damaged when it is verified, and set aside like any other, instead of
// failing the restore of the ps that reads it. It is written the bytes
// that follow the header, in order, in pieces of any size.
//
// A shard whose keys are in any order (ShardInfo.AnyOrder) has nothing to
// check here: a key that repeats in it is found by the restore, as it
// builds the table's index (sparse.ErrDuplicate), where finding it here
// would hold every key of the file in memory.
type keyOrder struct {
	ranges []keyRange
	pos    int64 // offset in the data section of the next byte written
	err    error
}

// keyRange is one table's keys tensor: [begin, end) of the data section.
type keyRange struct {
	table      string
	begin, end int64
	part       [8]byte // the bytes of a key split across writes
	n          int     // how many of part are filled
	row        int64   // rows read so far
	prev       uint64
}

// newKeyOrder returns the checker for shard k of m with header hdr, nil
// when the shard holds no table's keys, or keys in any order.
func newKeyOrder(hdr Header, m Manifest, k int) *keyOrder {
	if m.Shards[k].AnyOrder {
		return nil
	}
	keys := map[string]string{}
	for _, tb := range m.Tables {
		keys[KeysName(tb.Name)] = tb.Name
	}
	var o keyOrder
	for _, e := range hdr.Tensors {
		if tb, ok := keys[e.Name]; ok && e.DType == U64 && e.End > e.Begin {
			o.ranges = append(o.ranges, keyRange{table: tb, begin: e.Begin, end: e.End})
		}
	}
	if len(o.ranges) == 0 {
		return nil
	}
	return &o
}

func (o *keyOrder) Write(p []byte) (int, error) {
	n := len(p)
	start, end := o.pos, o.pos+int64(n)
	o.pos = end
	if o.err != nil {
		return n, nil
	}
	for i := range o.ranges {
		r := &o.ranges[i]
		lo, hi := max(start, r.begin), min(end, r.end)
		if lo >= hi {
			continue
		}
		b := p[lo-start : hi-start]
		for len(b) > 0 {
			if r.n == 0 && len(b) >= 8 { // whole keys: straight from p
				for ; len(b) >= 8; b = b[8:] {
					key := binary.LittleEndian.Uint64(b)
					if r.row > 0 && key <= r.prev {
						o.err = errorf(ErrFormat, "table %q: keys not strictly ascending at row %d (%d after %d)", r.table, r.row, key, r.prev)
						return n, nil
					}
					r.prev = key
					r.row++
				}
				continue
			}
			c := copy(r.part[r.n:], b)
			r.n += c
			b = b[c:]
			if r.n < 8 {
				break
			}
			r.n = 0
			key := binary.LittleEndian.Uint64(r.part[:])
			if r.row > 0 && key <= r.prev {
				o.err = errorf(ErrFormat, "table %q: keys not strictly ascending at row %d (%d after %d)", r.table, r.row, key, r.prev)
				return n, nil
			}
			r.prev = key
			r.row++
		}
	}
	return n, nil
}

// hashTee is a hash.Hash that also writes to w; its sums are h's.
type hashTee struct {
	hash.Hash
	w interface{ Write([]byte) (int, error) }
}

func (t hashTee) Write(p []byte) (int, error) {
	t.w.Write(p)
	return t.Hash.Write(p)
}
