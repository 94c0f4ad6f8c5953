package server

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/wire"
)

// incrDenseReply reads the reply to an incremental dense pull: the head
// (version, block count, bitmap of the blocks sent), then the dense
// sections' counts.
func (rc *rawConn) readDenseIncr() (ver uint64, blocks int, sel []uint64, counts map[string]int64) {
	rc.t.Helper()
	var hb [wire.RepHeaderLen]byte
	if _, err := io.ReadFull(rc.br, hb[:]); err != nil {
		rc.t.Fatal(err)
	}
	h, err := wire.ParseRepHeader(hb[:])
	if err != nil {
		rc.t.Fatal(err)
	}
	body := &wire.BodyReader{R: rc.br, Left: h.Body}
	if h.Err {
		kind, msg, _ := wire.ReadErrorBody(body, rc.version)
		rc.t.Fatalf("error reply %v %q", kind, msg)
	}
	if ver, err = body.Uint64("version"); err != nil {
		rc.t.Fatal(err)
	}
	nb, err := body.Uint32("blocks")
	if err != nil {
		rc.t.Fatal(err)
	}
	if sel, err = body.Keys(nil, int64(wire.BitmapWords(int(nb))), "bitmap"); err != nil {
		rc.t.Fatal(err)
	}
	counts = map[string]int64{}
	for range h.Dense {
		name, err := body.Name(nil, "name")
		if err != nil {
			rc.t.Fatal(err)
		}
		n, _ := body.Uint32("count")
		if _, err := body.Bytes(nil, int(4*n), "values"); err != nil {
			rc.t.Fatal(err)
		}
		counts[string(name)] = n
	}
	if body.Left != 0 {
		rc.t.Fatalf("%d bytes left after the dense sections", body.Left)
	}
	return ver, int(nb), sel, counts
}

// A ps answers an incremental dense pull with the blocks changed since the
// version named (all of them for another incarnation, or to a pull
// counting another number of blocks: a worker of another layout, which
// then sees the ps's count); a malformed pull gets a frame error, and the
// ps serves on.
func TestDenseIncrementalPulls(t *testing.T) {
	s := New(Config{NumWorkers: 2})
	addr := serveTCP(t, s)
	initDense(t, s, false, 2) // w[2] and b[1]: a block each
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(wire.PrefaceVersion(wire.DataVersionKinds)); err != nil {
		t.Fatal(err)
	}
	rc := &rawConn{t: t, c: c, br: bufio.NewReader(c), version: wire.DataVersionKinds}
	var hb [wire.HelloLen]byte
	if _, err := io.ReadFull(rc.br, hb[:]); err != nil {
		t.Fatal(err)
	}
	if h, err := wire.ParseHello(hb[:]); err != nil || h.Status != wire.HelloOK || h.Version != wire.DataVersionKinds {
		t.Fatalf("hello %+v, %v: want version %d spoken", h, err, wire.DataVersionKinds)
	}
	pull := func(held wire.DenseHeld) {
		rc.f.Reset(wire.ReqHeaderLen)
		rc.f.DenseHeld(held)
		rc.send(rc.f.Request(wire.ReqHeader{Op: wire.OpPull, PullDense: true, DenseIncremental: true}))
	}
	inc := s.shard.Incarnation()

	pull(wire.DenseHeld{Incarnation: inc, Since: 1, Blocks: 5})
	if _, nb, sel, counts := rc.readDenseIncr(); nb != 2 || sel[0] != 3 || counts["w"] != 2 || counts["b"] != 1 {
		t.Fatalf("a pull counting 5 blocks of 2: %d blocks, bitmap %b, counts %v: want the ps's 2, every one", nb, sel[0], counts)
	}
	pull(wire.DenseHeld{Blocks: 2})
	v0, nb, sel, counts := rc.readDenseIncr()
	if nb != 2 || sel[0] != 3 || counts["w"] != 2 || counts["b"] != 1 {
		t.Fatalf("first pull: %d blocks, bitmap %b, counts %v: want every block", nb, sel[0], counts)
	}
	pull(wire.DenseHeld{Incarnation: inc, Since: v0, Blocks: 2})
	if v, _, sel, counts := rc.readDenseIncr(); v != v0 || sel[0] != 0 || counts["w"] != 0 || counts["b"] != 0 {
		t.Fatalf("pull with nothing changed: version %d (was %d), bitmap %b, counts %v: want none", v, v0, sel[0], counts)
	}
	if r := rc.do(wire.ReqHeader{Op: wire.OpPush}, func(f *wire.Frame) { f.Dense("b", []float32{1}) }); r.Err {
		t.Fatalf("push: %q", r.msg)
	}
	pull(wire.DenseHeld{Incarnation: inc, Since: v0, Blocks: 2})
	v1, _, sel, counts := rc.readDenseIncr()
	if v1 <= v0 || sel[0] != 2 || counts["w"] != 0 || counts["b"] != 1 {
		t.Fatalf("pull after a push to b: version %d (was %d), bitmap %b, counts %v: want b's block only", v1, v0, sel[0], counts)
	}
	pull(wire.DenseHeld{Incarnation: inc + 1, Since: v1, Blocks: 2})
	if _, _, sel, _ := rc.readDenseIncr(); sel[0] != 3 {
		t.Fatalf("pull naming another incarnation: bitmap %b, want every block", sel[0])
	}
	// An incremental dense pull that pulls no dense values breaks the
	// format: an error reply, then the connection closes.
	rc.f.Reset(wire.ReqHeaderLen)
	rc.f.DenseHeld(wire.DenseHeld{Blocks: 2})
	h := wire.ReqHeader{Op: wire.OpPull, DenseIncremental: true}
	bufs := rc.f.Request(wire.ReqHeader{Op: wire.OpPull})
	h.Body = rc.f.BodyLen()
	h.Put(bufs[0][:wire.ReqHeaderLen])
	rc.send(bufs)
	if r := rc.read(); r.kind != wire.KindMalformed || !strings.Contains(r.msg, "pulls no dense values") {
		t.Fatalf("malformed pull: %v %q", r.kind, r.msg)
	}
	// A pull whose versions are cut short (a body of 8 bytes of the 20):
	// a frame error too, on a connection of its own.
	rc3 := dialRaw(t, addr)
	rc3.f.Reset(wire.ReqHeaderLen)
	rc3.f.DenseHeld(wire.DenseHeld{Blocks: 2})
	bufs = rc3.f.Request(wire.ReqHeader{Op: wire.OpPull, PullDense: true, DenseIncremental: true})
	h = wire.ReqHeader{Op: wire.OpPull, PullDense: true, DenseIncremental: true, Body: 8}
	h.Put(bufs[0][:wire.ReqHeaderLen])
	rc3.send(bufs)
	if r := rc3.read(); r.kind != wire.KindMalformed || !strings.Contains(r.msg, "dense version") {
		t.Fatalf("a pull cut short: %v %q", r.kind, r.msg)
	}
	// The ps serves on.
	rc2 := dialRaw(t, addr)
	if r := rc2.do(wire.ReqHeader{Op: wire.OpPull, PullDense: true}, nil); r.Err || r.dense["b"][0] != 0 {
		t.Fatalf("a pull after the malformed one: %+v", r)
	}
}
