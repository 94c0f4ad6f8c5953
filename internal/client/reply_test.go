package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/wire"
)

// The reply parser of the data path (recv, wire.ParseRepHeader,
// wire.ReadErrorBody) against replies a ps should never send, from a fake
// ps on a pipe that answers one request with given bytes and closes.

var (
	replyVars   = []model.Variable{{Name: "w", Shape: []int{3}}}
	replyTables = []model.Table{{Name: "emb", Dim: 2}}
	replyKeys   = []uint64{5, 6}
)

// replyClient is a client of one fake ps; answer sets the bytes the next
// connection answers its first request with.
type replyClient struct {
	c    *Client
	mu   sync.Mutex
	next []byte
	wg   sync.WaitGroup
}

func newReplyClient(t testing.TB) *replyClient {
	t.Helper()
	c, err := New([]string{"fake-ps:1"}, replyVars, Options{Tables: replyTables})
	if err != nil {
		t.Fatal(err)
	}
	rc := &replyClient{c: c}
	c.dp.ps[0].dial = func(ctx context.Context, _ string) (net.Conn, error) {
		cli, srv := net.Pipe()
		rc.mu.Lock()
		reply := rc.next
		rc.mu.Unlock()
		rc.wg.Go(func() { fakePS(srv, reply) })
		return cli, nil
	}
	t.Cleanup(func() {
		c.Close()
		rc.wg.Wait()
	})
	return rc
}

// fakePS answers the preface, reads one request whole, writes reply and
// closes the connection.
func fakePS(nc net.Conn, reply []byte) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	var pre [wire.PrefaceLen]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		return
	}
	v, _ := wire.CheckPreface(pre[:])
	var hello [wire.HelloLen]byte
	wire.Hello{Version: v, Slots: wire.CacheSlots, MaxCachedKeys: wire.MaxCachedKeys}.Put(hello[:])
	if _, err := nc.Write(hello[:]); err != nil {
		return
	}
	var hdr [wire.ReqHeaderLen]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return
	}
	h, err := wire.ParseReqHeader(hdr[:])
	if err != nil {
		return
	}
	if _, err := io.CopyN(io.Discard, br, h.Body); err != nil {
		return
	}
	nc.Write(reply)
}

// call sends a pull (dense and rows) or a push to the fake ps answering
// reply; the values pulled come back.
func (rc *replyClient) call(reply []byte, push bool) (model.Params, []float32, *Call) {
	rc.mu.Lock()
	rc.next = reply
	rc.mu.Unlock()
	// A fresh connection for each call: drop the idle ones.
	p := rc.c.dp.ps[0]
	p.mu.Lock()
	for _, d := range p.idle {
		d.nc.Close()
	}
	p.idle = nil
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	params := model.NewParams(replyVars)
	rows := make([]float32, 2*len(replyKeys))
	req := &Request{Pull: true, Params: params, SparseParams: []Rows{{Table: "emb", Keys: replyKeys, Values: rows}}}
	if push {
		req = &Request{Push: true, Step: 3, Grads: model.Params{"w": {1, 2, 3}}}
	}
	return params, rows, rc.c.Do(ctx, req)
}

// goodPullReply is what a ps answers the pull of call.
func goodPullReply(t testing.TB) []byte {
	var f wire.Frame
	f.Reset(wire.RepHeaderLen)
	f.Dense("w", []float32{1.5, -2, 3})
	f.SparseValues([]float32{.25, .5, .75, 1})
	return encodeReply(t, &f, wire.RepHeader{Step: 7, Incarnation: 99})
}

func errorReply(t testing.TB, kind wire.ErrorKind, msg string) []byte {
	var f wire.Frame
	f.Reset(wire.RepHeaderLen)
	f.ErrorBody(kind, wire.DataVersionKinds, msg)
	return encodeReply(t, &f, wire.RepHeader{Err: true})
}

func encodeReply(t testing.TB, f *wire.Frame, h wire.RepHeader) []byte {
	var b bytes.Buffer
	bufs := f.Reply(h)
	if _, err := bufs.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// edit returns a copy of b with f applied.
func edit(b []byte, f func(b []byte) []byte) []byte {
	return f(append([]byte(nil), b...))
}

func setBody(n uint64) func([]byte) []byte {
	return func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], n); return b }
}

func TestMalformedReplies(t *testing.T) {
	good := goodPullReply(t)
	goodErr := errorReply(t, wire.KindInvalid, "variable \"w\": bad")
	// Offsets in good: header, u16 name length, "w", u32 count, 3 values,
	// u32 count, 4 values.
	const nameLen, denseCount, denseVals = wire.RepHeaderLen, wire.RepHeaderLen + 3, wire.RepHeaderLen + 7
	const sparseCount = denseVals + 12
	rc := newReplyClient(t)
	for _, tc := range []struct {
		name  string
		reply []byte
		push  bool
		want  string // in the error
	}{
		{"header cut short", good[:20], false, "EOF"},
		{"cut in the name", good[:nameLen+2], false, "EOF"},
		{"cut in the values", good[:denseVals+5], false, "EOF"},
		{"cut in the rows", good[:len(good)-1], false, "EOF"},
		{"unknown status", edit(good, func(b []byte) []byte { b[0] = 2; return b }), false, "reply status 2"},
		{"unknown flags", edit(good, func(b []byte) []byte { b[1] = 0x80; return b }), false, "flags 0x80: unknown"},
		{"reserved bits", edit(good, func(b []byte) []byte { b[6] = 1; return b }), false, "unknown"},
		{"too many sections", edit(good, func(b []byte) []byte { binary.LittleEndian.PutUint16(b[2:], wire.MaxSections+1); return b }), false, "at most 4096 of each"},
		{"more variables than asked", edit(good, func(b []byte) []byte { b[2] = 2; return b }), false, "answered 2 variables and 1 tables, want 1 and 1"},
		{"fewer tables than asked", edit(good, func(b []byte) []byte { b[4] = 0; return b }), false, "answered 1 variables and 0 tables, want 1 and 1"},
		{"body shorter than its sections", edit(good, setBody(uint64(len(good)-wire.RepHeaderLen-4))), false, "rows needs 16 bytes, the body has 12 left"},
		{"body longer than its sections", append(edit(good, setBody(uint64(len(good)-wire.RepHeaderLen+8))), make([]byte, 8)...), false, "8 bytes after the last section"},
		{"body over the limit", edit(good, setBody(wire.MaxBody+1)), false, "reply body of 1073741825 bytes is over the limit of 1073741824"},
		{"huge body claimed", edit(good, setBody(1<<62)), false, "is over the limit"},
		{"name of no bytes", edit(good, func(b []byte) []byte { b[nameLen] = 0; return b }), false, "variable name of 0 bytes (want 1 to 1024)"},
		{"huge name", edit(good, func(b []byte) []byte { binary.LittleEndian.PutUint16(b[nameLen:], 60000); return b }), false, "variable name of 60000 bytes (want 1 to 1024)"},
		{"unknown variable", edit(good, func(b []byte) []byte { b[nameLen+2] = 'v'; return b }), false, `unknown variable "v"`},
		{"value count disagrees", edit(good, func(b []byte) []byte { b[denseCount] = 2; return b }), false, `ps sent 8 bytes for "w", want 12`},
		{"huge value count", edit(good, func(b []byte) []byte { binary.LittleEndian.PutUint32(b[denseCount:], 1<<30); return b }), false, `ps sent 4294967296 bytes for "w", want 12`},
		{"row count disagrees", edit(good, func(b []byte) []byte { b[sparseCount] = 6; return b }), false, `table "emb": ps answered 24 bytes, want 16`},
		{"huge row count", edit(good, func(b []byte) []byte { binary.LittleEndian.PutUint32(b[sparseCount:], math.MaxUint32); return b }), false, `table "emb": ps answered 17179869180 bytes, want 16`},
		{"values in a push's reply", good, true, "answered a push with 39 bytes of values"},
		{"error body too short", edit(goodErr, setBody(3)), false, "error reply of 3 bytes (want 4 to 65540)"},
		{"error body empty", edit(goodErr, setBody(0)), false, "error reply of 0 bytes (want 4 to 65540)"},
		{"error message too long", edit(goodErr, setBody(4+wire.MaxErrorMessage+1)), false, "error reply of 65541 bytes (want 4 to 65540)"},
		{"error body over the limit", edit(goodErr, setBody(wire.MaxBody+1)), false, "reply body of 1073741825 bytes is over the limit"},
		{"error body overruns the bytes sent", edit(goodErr, setBody(4+1000)), false, "unexpected EOF"},
		{"error reply of kind 0", errorReply(t, 0, "fine"), false, "error reply of kind 0"},
		{"error body cut in its code", goodErr[:wire.RepHeaderLen+2], false, "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, call := rc.call(tc.reply, tc.push)
			if call.Err == nil || !strings.Contains(call.Err.Error(), tc.want) {
				t.Fatalf("reply %x...: got error %v, want one saying %q", tc.reply[:min(len(tc.reply), 48)], call.Err, tc.want)
			}
			// A reply naming other variables or sizes is the ps holding
			// another layout (input to fix: ErrLayout); any other
			// malformed reply is a broken ps (a FrameError) or connection
			// (ErrUnavailable). Never a success, never a hang.
			var fe *wire.FrameError
			if !errors.As(call.Err, &fe) && !errors.Is(call.Err, ErrUnavailable) && !errors.Is(call.Err, ErrLayout) {
				t.Fatalf("malformed reply: %v, want a FrameError, ErrUnavailable or ErrLayout", call.Err)
			}
		})
	}

	// The replies they were made from are read whole.
	params, rows, call := rc.call(good, false)
	if call.Err != nil || call.Step != 7 {
		t.Fatalf("well-formed reply: step %d, %v", call.Step, call.Err)
	}
	if w := params["w"]; w[0] != 1.5 || w[1] != -2 || w[2] != 3 || rows[0] != .25 || rows[3] != 1 {
		t.Fatalf("well-formed reply: w %v, rows %v", w, rows)
	}
	_, _, call = rc.call(goodErr, false)
	var pe *psError
	if !errors.As(call.Err, &pe) || pe.kind != wire.KindInvalid || Retryable(call.Err) || !strings.Contains(call.Err.Error(), `variable "w": bad`) {
		t.Fatalf("well-formed error reply: %v", call.Err)
	}
}

// FuzzReply feeds arbitrary replies to a pull of one variable and one
// table. The client must never panic nor hang; a reply it accepts must be
// exactly a well-formed one, its values where the layout puts them.
func FuzzReply(f *testing.F) {
	good := goodPullReply(f)
	f.Add(good)
	f.Add(errorReply(f, wire.KindCacheMiss, "key cache miss"))
	f.Add(errorReply(f, wire.KindInvalid, ""))
	var e wire.Frame
	e.Reset(wire.RepHeaderLen)
	f.Add(encodeReply(f, &e, wire.RepHeader{Step: 1, Dropped: true}))
	f.Add(edit(good, setBody(wire.MaxBody)))
	rc := newReplyClient(f)
	f.Fuzz(func(t *testing.T, reply []byte) {
		params, rows, call := rc.call(reply, false)
		if errors.Is(call.Err, os.ErrDeadlineExceeded) || errors.Is(call.Err, context.DeadlineExceeded) {
			t.Fatalf("reply %x: the call hung: %v", reply, call.Err)
		}
		if call.Err != nil {
			return
		}
		want := len(good)
		if len(reply) < want || reply[0] != 0 || !bytes.Equal(reply[2:6], good[2:6]) || !bytes.Equal(reply[16:24], good[16:24]) {
			t.Fatalf("accepted a reply not shaped as a pull's: %x", reply)
		}
		got := append(wire.Float32Bytes(params["w"]), wire.Float32Bytes(rows)...)
		if !bytes.Equal(got[:12], reply[wire.RepHeaderLen+7:wire.RepHeaderLen+19]) || !bytes.Equal(got[12:], reply[wire.RepHeaderLen+23:want]) {
			t.Fatalf("reply %x: read values %x", reply, got)
		}
		if call.Step != int64(binary.LittleEndian.Uint64(reply[8:])) {
			t.Fatalf("reply %x: step %d", reply, call.Step)
		}
	})
}
