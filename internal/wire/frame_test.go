package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// encode writes a frame's buffers out as one byte slice.
func encode(t testing.TB, bufs [][]byte) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, p := range bufs {
		b.Write(p)
	}
	return b.Bytes()
}

// sampleRequests are requests of every shape, as a client would send them.
func sampleRequests(t testing.TB) [][]byte {
	t.Helper()
	var f Frame
	var out [][]byte
	// A dense push+pull of two variables, one gradient with a NaN.
	f.Reset(ReqHeaderLen)
	f.Dense("w", []float32{1, 2, 3})
	f.Dense("layer/part_1", []float32{4, float32(math.NaN()), 6, float32(math.Inf(-1))})
	out = append(out, encode(t, f.Request(ReqHeader{Op: OpPushPull, PullDense: true, Worker: 3, Step: 41, MinStep: 42})))
	// A sparse push+pull: keys kept in slot 2, pulled as the push's.
	f.Reset(ReqHeaderLen)
	f.SparsePush("emb", KeysInline, 2, 3, []uint64{7, 1 << 63, 9}, []float32{.5, .25, .125, 1, 2, 3})
	f.SparsePull("emb", KeysAsPush, 0, 3, nil)
	out = append(out, encode(t, f.Request(ReqHeader{Op: OpPushPull, Worker: 1, Step: 5})))
	// A pull of cached keys and of keys sent without a slot.
	f.Reset(ReqHeaderLen)
	f.SparsePull("emb", KeysCached, 2, 3, nil)
	f.SparsePull("bias", KeysInline, NoSlot, 2, []uint64{1, 2})
	out = append(out, encode(t, f.Request(ReqHeader{Op: OpPull, PullDense: true, MinStep: 9})))
	// A push of a dense gradient and of rows of keys the ps keeps in slot 1.
	f.Reset(ReqHeaderLen)
	f.Dense("w", []float32{-1, 0.5})
	f.SparsePush("emb", KeysCached, 1, 2, nil, []float32{1, 2, 3, 4})
	out = append(out, encode(t, f.Request(ReqHeader{Op: OpPush, Worker: 4, Step: 12, Incarnation: 0xdeadbeef})))
	// A dense pull alone, waiting for step 3.
	f.Reset(ReqHeaderLen)
	out = append(out, encode(t, f.Request(ReqHeader{Op: OpPull, PullDense: true, MinStep: 3})))
	// An empty push (a ps that holds none of the pushed variables).
	f.Reset(ReqHeaderLen)
	out = append(out, encode(t, f.Request(ReqHeader{Op: OpPush, Worker: 2, Step: 1})))
	// Incremental pulls: rows held at version 17 but those of key 1 and
	// 70 (of 70 keys), and none held.
	f.Reset(ReqHeaderLen)
	keys := make([]uint64, 70)
	for i := range keys {
		keys[i] = uint64(3 * i)
	}
	f.SparsePush("emb", KeysInline, 0, 2, []uint64{4, 5}, []float32{1, 2})
	f.SparsePullIncr("emb", KeysInline, 3, 70, keys, 0xfeed, 17, []uint64{1 << 1, 1 << 5})
	f.SparsePullIncr("bias", KeysAsPush, 0, 2, nil, 0xfeed, 0, nil)
	out = append(out, encode(t, f.Request(ReqHeader{Op: OpPushPull, Incremental: true, Worker: 1, Step: 8})))
	return out
}

// reencode writes a parsed request back with Frame.
func reencode(t testing.TB, r *Request) []byte {
	t.Helper()
	var f Frame
	f.Reset(ReqHeaderLen)
	for _, d := range r.Dense {
		f.Dense(string(d.Name), d.Data)
	}
	for _, s := range r.SparsePush {
		f.SparsePush(string(s.Table), s.Mode, s.Arg, s.NumKeys, s.Keys, s.Values)
	}
	for _, s := range r.SparsePull {
		if r.Incremental {
			f.SparsePullIncr(string(s.Table), s.Mode, s.Arg, s.NumKeys, s.Keys, s.Incarnation, s.Since, s.Lack)
			continue
		}
		f.SparsePull(string(s.Table), s.Mode, s.Arg, s.NumKeys, s.Keys)
	}
	return encode(t, f.Request(r.ReqHeader))
}

func TestRequestRoundTrip(t *testing.T) {
	reqs := sampleRequests(t)
	var all []byte
	for _, b := range reqs {
		all = append(all, b...)
	}
	// One reader for all of them, as on a connection: memory is reused.
	br := bufio.NewReaderSize(bytes.NewReader(all), 16)
	var r Request
	for i, want := range reqs {
		if err := r.ReadRequest(br); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := reencode(t, &r); !bytes.Equal(got, want) {
			t.Fatalf("request %d changed in the round trip:\n got %x\nwant %x", i, got, want)
		}
		switch i {
		case 0:
			if r.Op != OpPushPull || !r.PullDense || r.Worker != 3 || r.Step != 41 || r.MinStep != 42 || len(r.Dense) != 2 {
				t.Fatalf("request 0: %+v", r.ReqHeader)
			}
			if string(r.Dense[1].Name) != "layer/part_1" || r.Dense[0].Bad != -1 || r.Dense[1].Bad != 1 {
				t.Fatalf("request 0 sections: %+v", r.Dense)
			}
		case 1:
			s := r.SparsePush[0]
			if s.Mode != KeysInline || s.Arg != 2 || !slices.Equal(s.Keys, []uint64{7, 1 << 63, 9}) || s.Values[5] != 3 || s.Bad != -1 {
				t.Fatalf("request 1 push section: %+v", s)
			}
			if p := r.SparsePull[0]; p.Mode != KeysAsPush || p.Arg != 0 || p.NumKeys != 3 {
				t.Fatalf("request 1 pull section: %+v", p)
			}
		case 3:
			if r.Op != OpPush || r.Incarnation != 0xdeadbeef {
				t.Fatalf("request 3: %+v, want a push naming incarnation 0xdeadbeef", r.ReqHeader)
			}
		}
	}
	if err := r.ReadRequest(br); err != io.EOF {
		t.Fatalf("after the last request: %v, want io.EOF", err)
	}
}

func TestReplyRoundTrip(t *testing.T) {
	var f Frame
	f.Reset(RepHeaderLen)
	f.Dense("w", []float32{1, 2})
	f.SparseValues([]float32{3, 4, 5})
	b := encode(t, f.Reply(RepHeader{Dropped: true, Step: 7}))
	h, err := ParseRepHeader(b)
	if err != nil || !h.Dropped || h.Err || h.Step != 7 || h.Dense != 1 || h.Sparse != 1 || h.Body != int64(len(b)-RepHeaderLen) {
		t.Fatalf("header %+v, %v", h, err)
	}
	body := BodyReader{R: bufio.NewReader(bytes.NewReader(b[RepHeaderLen:])), Left: h.Body}
	name, err := body.Name(nil, "variable")
	if err != nil || string(name) != "w" {
		t.Fatalf("name %q, %v", name, err)
	}
	if n, err := body.Uint32("count"); err != nil || n != 2 {
		t.Fatalf("count %d, %v", n, err)
	}
	vals := make([]float32, 2)
	if err := body.FloatsInto(vals, "values"); err != nil || vals[1] != 2 {
		t.Fatalf("values %v, %v", vals, err)
	}
	if n, _ := body.Uint32("count"); n != 3 {
		t.Fatalf("sparse count %d", n)
	}
	rows := make([]float32, 3)
	if err := body.FloatsInto(rows, "rows"); err != nil || rows[2] != 5 || body.Left != 0 {
		t.Fatalf("rows %v, %v, %d left", rows, err, body.Left)
	}
	// An error reply.
	f.Reset(RepHeaderLen)
	for _, tc := range []struct {
		version  int
		kind     ErrorKind
		code     uint32 // on the wire
		readBack ErrorKind
	}{
		{DataVersionKinds, KindCacheMiss, 7, KindCacheMiss},
		{DataVersionKinds, KindBehind, 4, KindBehind},
		{DataVersionKinds, KindUnavailable, 64, KindUnavailable},
		// Before DataVersionKinds, the gRPC status code older workers read.
		{DataVersionDenseIncremental, KindCacheMiss, 10, KindRestored},
		{DataVersion, KindBehind, 9, KindNotReady},
		{DataVersion, KindInvalid, 3, KindInvalid},
		{DataVersion, KindMalformed, 3, KindInvalid},
		{DataVersion, KindFailed, 4, KindFailed},
		{DataVersion, KindUnavailable, 14, KindUnavailable},
		{DataVersion, KindInternal, 13, KindInternal},
	} {
		f.Reset(RepHeaderLen)
		f.ErrorBody(tc.kind, tc.version, "ps 0 rejected the push: bad")
		b = encode(t, f.Reply(RepHeader{Err: true}))
		h, err = ParseRepHeader(b)
		if err != nil || !h.Err {
			t.Fatalf("error header %+v, %v", h, err)
		}
		if c := binary.LittleEndian.Uint32(b[RepHeaderLen:]); c != tc.code {
			t.Errorf("version %d, %v: code %d on the wire, want %d", tc.version, tc.kind, c, tc.code)
		}
		kind, msg, err := ReadErrorBody(&BodyReader{R: bufio.NewReader(bytes.NewReader(b[RepHeaderLen:])), Left: h.Body}, tc.version)
		if err != nil || kind != tc.readBack || msg != "ps 0 rejected the push: bad" {
			t.Errorf("version %d, %v: error body %v %q %v, want %v", tc.version, tc.kind, kind, msg, err, tc.readBack)
		}
	}
}

// Every malformed request is an error (a *FrameError where the bytes are
// wrong, io.ErrUnexpectedEOF where they stop), never a panic.
func TestMalformedRequests(t *testing.T) {
	good := sampleRequests(t)
	put16 := func(b []byte, at int, v uint16) []byte { binary.LittleEndian.PutUint16(b[at:], v); return b }
	put32 := func(b []byte, at int, v uint32) []byte { binary.LittleEndian.PutUint32(b[at:], v); return b }
	put64 := func(b []byte, at int, v uint64) []byte { binary.LittleEndian.PutUint64(b[at:], v); return b }
	mod := func(i int, f func([]byte) []byte) []byte { return f(slices.Clone(good[i])) }
	body0 := int64(len(good[0]) - ReqHeaderLen)
	for _, tc := range []struct {
		name string
		b    []byte
		want string // in the error; "" for io.ErrUnexpectedEOF
	}{
		{"op 0", mod(0, func(b []byte) []byte { b[0] = 0; return b }), "unknown op 0"},
		{"op 9", mod(0, func(b []byte) []byte { b[0] = 9; return b }), "unknown op 9"},
		{"flags", mod(0, func(b []byte) []byte { b[1] = 0x80; return b }), "unknown flags"},
		{"pull naming an incarnation", mod(2, func(b []byte) []byte { b[12] = 1; return b }), "a pull names the incarnation"},
		{"sections", mod(0, func(b []byte) []byte { return put16(b, 2, MaxSections+1) }), "at most 4096"},
		{"pull with push sections", mod(0, func(b []byte) []byte { b[0] = byte(OpPull); return b }), "a pull carries"},
		{"push asks to pull", mod(2, func(b []byte) []byte { b[0] = byte(OpPush); return b }), "a push asks to pull"},
		{"body over the limit", mod(0, func(b []byte) []byte { return put64(b, 32, MaxBody+1) }), "over the limit"},
		{"body too short", mod(0, func(b []byte) []byte { return put64(b, 32, uint64(body0-5)) }), "bytes, the body has"},
		{"body too long", mod(0, func(b []byte) []byte { return append(put64(b, 32, uint64(body0+3)), 1, 2, 3) }), "after the last section"},
		{"empty name", mod(0, func(b []byte) []byte { return put16(b, ReqHeaderLen, 0) }), "name of 0 bytes"},
		{"long name", mod(0, func(b []byte) []byte { return put16(b, ReqHeaderLen, MaxName+1) }), "name of 1025 bytes"},
		{"count past the body", mod(0, func(b []byte) []byte { return put32(b, ReqHeaderLen+3, 1<<30) }), "the body has"},
		{"key mode", mod(1, func(b []byte) []byte { b[ReqHeaderLen+5] = 7; return b }), "unknown key mode 7"},
		{"slot", mod(1, func(b []byte) []byte { b[ReqHeaderLen+6] = CacheSlots; return b }), "slot 8, there are 8"},
		{"as push in a push", mod(1, func(b []byte) []byte { b[ReqHeaderLen+5] = byte(KeysAsPush); return b }), "takes the keys of push section"},
		{"too many keys for a slot", mod(1, func(b []byte) []byte { return put32(b, ReqHeaderLen+7, MaxCachedKeys+1) }), "keeps 4194305 keys"},
		{"cut in the header", good[0][:ReqHeaderLen-1], ""},
		{"cut in a section", good[0][:ReqHeaderLen+9], ""},
		{"cut in the values", good[1][:len(good[1])-2], ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Request
			err := r.ReadRequest(bufio.NewReader(bytes.NewReader(tc.b)))
			var fe *FrameError
			switch {
			case tc.want == "" && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
			case tc.want != "" && (!errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want a FrameError containing %q", err, tc.want)
			}
		})
	}
}

// A frame that claims a gigabyte and sends little costs little memory:
// buffers grow with the bytes that arrive.
func TestRequestMemoryFollowsBytes(t *testing.T) {
	var f Frame
	f.Reset(ReqHeaderLen)
	f.Dense("w", make([]float32, 100))
	b := encode(t, f.Request(ReqHeader{Op: OpPush}))
	put := binary.LittleEndian.PutUint64
	put(b[32:], MaxBody)
	binary.LittleEndian.PutUint32(b[ReqHeaderLen+3:], MaxBody/4-10)
	var r Request
	err := r.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
	}
	if c := cap(r.floats); c > 2*readChunk/4 {
		t.Fatalf("allocated %d floats for a frame that sent 100", c)
	}
}

func TestPrefaceAndHello(t *testing.T) {
	p := Preface()
	if len(p) != PrefaceLen || string(p[:4]) != DataMagic {
		t.Fatalf("preface %q", p)
	}
	if v, err := CheckPreface(p); err != nil || v != DataVersion {
		t.Fatalf("CheckPreface: %d, %v", v, err)
	}
	if _, err := CheckPreface([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err == nil {
		t.Fatal("an HTTP/2 preface passed as the data path's")
	}
	var b [HelloLen]byte
	Hello{Version: 1, Slots: CacheSlots, MaxCachedKeys: MaxCachedKeys}.Put(b[:])
	h, err := ParseHello(b[:])
	if err != nil || h.Version != 1 || h.Status != HelloOK || h.Slots != CacheSlots || h.MaxCachedKeys != MaxCachedKeys {
		t.Fatalf("hello %+v, %v", h, err)
	}
}

// FuzzReadRequest feeds arbitrary bytes to the ps's frame reader. It must
// never panic nor allocate much more than it was sent; whatever it accepts
// must encode back to exactly the bytes it read.
func FuzzReadRequest(f *testing.F) {
	for _, b := range sampleRequests(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		br := bufio.NewReader(bytes.NewReader(b))
		err := r.ReadRequest(br)
		if max(cap(r.floats)*4, cap(r.keys)*8, cap(r.names)) > 2*len(b)+2*readChunk {
			t.Fatalf("%d bytes of input made buffers of %d floats, %d keys, %d name bytes", len(b), cap(r.floats), cap(r.keys), cap(r.names))
		}
		if err != nil {
			return
		}
		n := ReqHeaderLen + int(r.Body)
		if got := reencode(t, &r); !bytes.Equal(got, b[:n]) {
			t.Fatalf("accepted a frame that encodes back differently:\n  in %x\n out %x", b[:n], got)
		}
	})
}

// Values arriving in pieces of any size, split inside values, are read and
// checked exactly, and buffers grow while they arrive.
func TestFloatsCheckedInPieces(t *testing.T) {
	vals := make([]float32, 3000)
	for i := range vals {
		vals[i] = float32(i) * 0.5
	}
	for _, badAt := range []int{-1, 0, 1, 999, 2999} {
		v := slices.Clone(vals)
		if badAt >= 0 {
			v[badAt] = float32(math.Inf(1))
			if badAt+7 < len(v) {
				v[badAt+7] = float32(math.NaN()) // a later one does not count
			}
		}
		raw := Float32Bytes(v)
		for name, rd := range map[string]io.Reader{
			"one byte": iotest.OneByteReader(bytes.NewReader(raw)),
			"halves":   iotest.HalfReader(bytes.NewReader(raw)),
			"whole":    bytes.NewReader(raw),
		} {
			br := bufio.NewReaderSize(rd, 16)
			body := BodyReader{R: br, Left: int64(len(raw))}
			got, bad, mx, err := body.FloatsMax([]float32{42}, int64(len(v)), "values")
			if err != nil || bad != badAt || got[0] != 42 || !bitsEqualF(got[1:], v) {
				t.Fatalf("%s, bad at %d: bad %d, err %v, equal %v", name, badAt, bad, err, bitsEqualF(got[1:], v))
			}
			// The largest |value| found in the same pass: the bits of
			// the largest magnitude, +Inf's or more when one is not
			// finite.
			want := uint32(0)
			for _, x := range v {
				want = max(want, math.Float32bits(x)&0x7fffffff)
			}
			if mx != want {
				t.Fatalf("%s, bad at %d: largest |value| bits %#x, want %#x", name, badAt, mx, want)
			}
		}
	}
}

func bitsEqualF(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// countReader counts the reads that reach it.
type countReader struct {
	r     io.Reader
	reads int
}

func (c *countReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// A large section is read with as few reads as its arrivals allow, not a
// chunk at a time (a 1 MiB gradient took four reads of 256 KiB even when
// it was all there), into a buffer already large enough; across the
// buffer's growth and in pieces of any size the values and the index of
// the first value that is not finite are exact, and a section cut short
// is an unexpected EOF.
func TestFloatsCheckedLargeSections(t *testing.T) {
	const n = 5*checkChunk/2 + 3
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i) * 0.25
	}
	raw := Float32Bytes(vals)
	buf := make([]float32, 0, n+1)
	cr := &countReader{r: bytes.NewReader(raw)}
	body := BodyReader{R: bufio.NewReaderSize(cr, 1<<10), Left: int64(len(raw))}
	got, bad, err := body.FloatsChecked(buf, n, "values")
	if err != nil || bad != -1 || !bitsEqualF(got, vals) {
		t.Fatalf("all there at once: bad %d, err %v, equal %v", bad, err, bitsEqualF(got, vals))
	}
	if cr.reads != 1 {
		t.Errorf("%d values all there at once, buffer large enough: %d reads, want 1", n, cr.reads)
	}
	for _, badAt := range []int{0, checkChunk - 1, checkChunk, 2*checkChunk + 5, n - 1} {
		v := slices.Clone(vals)
		v[badAt] = float32(math.NaN())
		v[min(badAt+1, n-1)] = float32(math.Inf(-1))
		raw := Float32Bytes(v)
		for name, rd := range map[string]io.Reader{
			"halves":        iotest.HalfReader(bytes.NewReader(raw)),
			"odd pieces":    &pieceReader{r: bytes.NewReader(raw), sizes: []int{1, 4093, 7, 65539, 2}},
			"all, grown":    bytes.NewReader(raw),
			"all, in place": bytes.NewReader(raw),
		} {
			var start []float32
			if name == "all, in place" {
				start = make([]float32, 0, n)
			}
			body := BodyReader{R: bufio.NewReaderSize(rd, 16), Left: int64(len(raw))}
			got, bad, err := body.FloatsChecked(start, n, "values")
			if err != nil || bad != badAt || !bitsEqualF(got, v) {
				t.Fatalf("%s, bad at %d: bad %d, err %v, equal %v", name, badAt, bad, err, bitsEqualF(got, v))
			}
		}
	}
	for _, cut := range []int{0, 3, 4 * checkChunk, len(raw) - 1} {
		body := BodyReader{R: bufio.NewReaderSize(bytes.NewReader(raw[:cut]), 16), Left: int64(len(raw))}
		if _, _, err := body.FloatsChecked(nil, n, "values"); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("section cut after %d of %d bytes: err %v, want %v", cut, len(raw), err, io.ErrUnexpectedEOF)
		}
	}
}

// pieceReader returns at most sizes[i] bytes on its i-th read, cycling.
type pieceReader struct {
	r     io.Reader
	sizes []int
	i     int
}

func (p *pieceReader) Read(b []byte) (int, error) {
	k := p.sizes[p.i%len(p.sizes)]
	p.i++
	return p.r.Read(b[:min(k, len(b))])
}
