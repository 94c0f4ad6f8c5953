package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The wire form of a Message between ps, for the shell's peer connections:
// little-endian fixed-width fields, lists prefixed by their length, an
// entry's Data as bytes. Decode checks every length against the bytes left
// before it allocates, so a message cannot make it allocate more than its
// own size (plus slice headers).
//
//	version u8 (1) | type u8 | grant u8 | from u32 | to u32 | shard u32
//	seq u64 | commit u64 | sent i64 (Unix ns; math.MinInt64 for none)
//	removed: n u32, n × u32 | votes: n u32, n × u32
//	boot u64 | epoch u64 | gens: n u32, n × u64 | boots: n u32, n × u64
//	admits: n u32, n × (ps u32 | boot u64)
//	entries: n u32, n × (shard u32 | seq u64 | reqs: n u32, n × (client u32 | n u64) | data: n u32, n bytes)

const codecVersion = 2

const noTime = -1 << 63

// ErrCodec is the kind of every Decode error.
var ErrCodec = errors.New("replica: malformed message")

// MarshalBinary encodes m; every entry's Data must be a []byte (or nil).
func (m Message) MarshalBinary() ([]byte, error) {
	bufs, err := m.AppendBuffers(nil)
	if err != nil {
		return nil, err
	}
	var n int
	for _, p := range bufs {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range bufs {
		b = append(b, p...)
	}
	return b, nil
}

// AppendBuffers is the wire form of m as pieces to write in order (with
// one writev, net.Buffers): the entries' Data are pieces of their own, not
// copied. Every entry's Data must be a []byte (or nil).
func (m Message) AppendBuffers(bufs [][]byte) ([][]byte, error) {
	b := make([]byte, 0, 64)
	b = append(b, codecVersion, byte(m.Type), boolByte(m.Grant))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.From))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.To))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Shard))
	b = binary.LittleEndian.AppendUint64(b, m.Seq)
	b = binary.LittleEndian.AppendUint64(b, m.Commit)
	sent := int64(noTime)
	if !m.Sent.IsZero() {
		sent = m.Sent.UnixNano()
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(sent))
	for _, l := range [][]int{m.Removed, m.Votes} {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(l)))
		for _, x := range l {
			b = binary.LittleEndian.AppendUint32(b, uint32(x))
		}
	}
	b = binary.LittleEndian.AppendUint64(b, m.Boot)
	b = binary.LittleEndian.AppendUint64(b, m.Epoch)
	for _, l := range [][]uint64{m.Gens, m.Boots} {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(l)))
		for _, x := range l {
			b = binary.LittleEndian.AppendUint64(b, x)
		}
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Admits)))
	for _, a := range m.Admits {
		b = binary.LittleEndian.AppendUint32(b, uint32(a.PS))
		b = binary.LittleEndian.AppendUint64(b, a.Boot)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Entries)))
	for i, e := range m.Entries {
		data, ok := e.Data.([]byte)
		if !ok && e.Data != nil {
			return nil, fmt.Errorf("replica: entry %d (shard %d seq %d): data is %T, want []byte", i, e.Shard, e.Seq, e.Data)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(e.Shard))
		b = binary.LittleEndian.AppendUint64(b, e.Seq)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e.Reqs)))
		for _, r := range e.Reqs {
			b = binary.LittleEndian.AppendUint32(b, uint32(r.Client))
			b = binary.LittleEndian.AppendUint64(b, r.N)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
		if len(data) > 0 {
			bufs = append(bufs, b, data)
			b = make([]byte, 0, 64)
		}
	}
	if len(b) > 0 {
		bufs = append(bufs, b)
	}
	return bufs, nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// reader reads the wire form, remembering the first error.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %s", ErrCodec, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b)-r.off < n {
		r.fail("%s needs %d bytes, %d left", what, n, len(r.b)-r.off)
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

func (r *reader) u8(what string) byte {
	if p := r.take(1, what); p != nil {
		return p[0]
	}
	return 0
}

func (r *reader) u32(what string) uint32 {
	if p := r.take(4, what); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (r *reader) u64(what string) uint64 {
	if p := r.take(8, what); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// count reads a list length and checks that the list, at least each
// bytes an item, fits in what is left.
func (r *reader) count(what string, each int) int {
	n := r.u32(what + " count")
	if r.err != nil {
		return 0
	}
	if left := len(r.b) - r.off; uint64(n)*uint64(each) > uint64(left) {
		r.fail("%s: %d claimed (at least %d bytes each), %d bytes left", what, n, each, left)
		return 0
	}
	return int(n)
}

// UnmarshalBinary decodes b into m. The entries' Data are copies, never
// aliases of b.
func (m *Message) UnmarshalBinary(b []byte) error { return m.decode(b, false) }

// UnmarshalOwned is UnmarshalBinary for a b the caller gives up: the
// entries' Data are slices of b, not copies.
func (m *Message) UnmarshalOwned(b []byte) error { return m.decode(b, true) }

func (m *Message) decode(b []byte, alias bool) error {
	r := &reader{b: b}
	if v := r.u8("version"); r.err == nil && v != codecVersion {
		r.fail("version %d, want %d", v, codecVersion)
	}
	var out Message
	t := r.u8("type")
	if r.err == nil && int(t) >= len(msgNames) {
		r.fail("message type %d, want 0..%d", t, len(msgNames)-1)
	}
	out.Type = MsgType(t)
	switch g := r.u8("grant"); {
	case r.err == nil && g > 1:
		r.fail("grant %d, want 0 or 1", g)
	default:
		out.Grant = g == 1
	}
	out.From = int(int32(r.u32("from")))
	out.To = int(int32(r.u32("to")))
	out.Shard = int(int32(r.u32("shard")))
	out.Seq = r.u64("seq")
	out.Commit = r.u64("commit")
	if sent := int64(r.u64("sent")); sent != noTime {
		out.Sent = time.Unix(0, sent)
	}
	for _, l := range []*[]int{&out.Removed, &out.Votes} {
		n := r.count("ps ids", 4)
		for range n {
			*l = append(*l, int(int32(r.u32("ps id"))))
		}
	}
	out.Boot = r.u64("boot")
	out.Epoch = r.u64("epoch")
	for _, l := range []*[]uint64{&out.Gens, &out.Boots} {
		n := r.count("incarnations", 8)
		for range n {
			*l = append(*l, r.u64("incarnation"))
		}
	}
	na := r.count("admissions", 4+8)
	for range na {
		out.Admits = append(out.Admits, Admit{PS: int(int32(r.u32("admitted ps"))), Boot: r.u64("admitted boot")})
	}
	n := r.count("entries", 4+8+4+4)
	for range n {
		e := Entry{Shard: int(int32(r.u32("entry shard"))), Seq: r.u64("entry seq")}
		k := r.count("request ids", 4+8)
		for range k {
			e.Reqs = append(e.Reqs, ReqID{Client: int(int32(r.u32("client"))), N: r.u64("request n")})
		}
		size := r.count("data bytes", 1)
		if p := r.take(size, "data"); p != nil {
			if alias {
				e.Data = p[:len(p):len(p)]
			} else {
				e.Data = append([]byte{}, p...)
			}
		}
		out.Entries = append(out.Entries, e)
	}
	if r.err == nil && r.off != len(b) {
		r.fail("%d bytes after the message", len(b)-r.off)
	}
	if r.err != nil {
		return r.err
	}
	*m = out
	return nil
}
