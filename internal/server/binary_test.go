package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// serveTCP serves s on a loopback port until the test ends.
func serveTCP(t *testing.T, s *Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ServeListener(ctx, lis, s); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String()
}

// rawConn is a data-path connection driven frame by frame.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
	f  wire.Frame
	// version is the data path version the connection speaks.
	version int
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	return dialRawVersion(t, addr, wire.DataVersionKinds)
}

// dialRawVersion opens a data connection asking for the given version, as
// a worker of that version would.
func dialRawVersion(t *testing.T, addr string, version int) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(wire.PrefaceVersion(version)); err != nil {
		t.Fatal(err)
	}
	rc := &rawConn{t: t, c: c, br: bufio.NewReader(c), version: version}
	var hb [wire.HelloLen]byte
	if _, err := io.ReadFull(rc.br, hb[:]); err != nil {
		t.Fatal(err)
	}
	if h, err := wire.ParseHello(hb[:]); err != nil || h.Status != wire.HelloOK {
		t.Fatalf("hello %+v, %v", h, err)
	}
	return rc
}

// reply is a read reply: the error's kind and message (and, before
// DataVersionKinds, the status code that stands for the kind), or the
// values.
type reply struct {
	wire.RepHeader
	kind  wire.ErrorKind
	code  codes.Code
	msg   string
	dense map[string][]float32
	rows  [][]float32
}

func (rc *rawConn) send(bufs net.Buffers) {
	rc.t.Helper()
	if _, err := bufs.WriteTo(rc.c); err != nil {
		rc.t.Fatal(err)
	}
}

func (rc *rawConn) read() reply {
	rc.t.Helper()
	var hb [wire.RepHeaderLen]byte
	if _, err := io.ReadFull(rc.br, hb[:]); err != nil {
		rc.t.Fatal(err)
	}
	h, err := wire.ParseRepHeader(hb[:])
	if err != nil {
		rc.t.Fatal(err)
	}
	r := reply{RepHeader: h, dense: map[string][]float32{}}
	body := &wire.BodyReader{R: rc.br, Left: h.Body}
	if h.Err {
		if rc.version < wire.DataVersionKinds {
			// An older worker's connection: a status code, then the message.
			code, err := body.Uint32("code")
			if err != nil {
				rc.t.Fatal(err)
			}
			msg, err := body.Bytes(nil, int(body.Left), "message")
			if err != nil {
				rc.t.Fatal(err)
			}
			r.code, r.kind, r.msg = codes.Code(code), wire.KindOfGRPCCode(uint32(code)), string(msg)
			return r
		}
		kind, msg, err := wire.ReadErrorBody(body, rc.version)
		if err != nil {
			rc.t.Fatal(err)
		}
		r.kind, r.msg = kind, msg
		return r
	}
	for range h.Dense {
		name, err := body.Name(nil, "name")
		if err != nil {
			rc.t.Fatal(err)
		}
		n, _ := body.Uint32("count")
		v := make([]float32, n)
		if err := body.FloatsInto(v, "values"); err != nil {
			rc.t.Fatal(err)
		}
		r.dense[string(name)] = v
	}
	for range h.Sparse {
		n, _ := body.Uint32("count")
		v := make([]float32, n)
		if err := body.FloatsInto(v, "rows"); err != nil {
			rc.t.Fatal(err)
		}
		r.rows = append(r.rows, v)
	}
	return r
}

// do sends the request built by build and reads the reply.
func (rc *rawConn) do(h wire.ReqHeader, build func(f *wire.Frame)) reply {
	rc.t.Helper()
	rc.f.Reset(wire.ReqHeaderLen)
	if build != nil {
		build(&rc.f)
	}
	rc.send(rc.f.Request(h))
	return rc.read()
}

func initDense(t *testing.T, s *Server, sync bool, workers int) {
	t.Helper()
	_, err := s.Init(context.Background(), &pb.InitRequest{
		Vars: []*pb.VarSpec{
			{Name: "w", Shape: []int64{2}, Init: f32(1, 2)},
			{Name: "b", Shape: []int64{1}, Init: f32(0.5)},
		},
		Tables:              []*pb.TableSpec{{Name: "emb", Dim: 2}},
		Optimizer:           &pb.OptimizerConfig{Name: "sgd", LearningRate: 0.5},
		Sync:                sync,
		ReplicasToAggregate: int32(workers),
		NumWorkers:          int32(workers),
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A malformed data-path push is refused with the gRPC path's code and
// message, changes nothing, is counted, and the connection goes on.
func TestDataPathRejectsBadPushes(t *testing.T) {
	s := New(Config{NumWorkers: 2})
	addr := serveTCP(t, s)
	rc := dialRaw(t, addr)
	if r := rc.do(wire.ReqHeader{Op: wire.OpPull, PullDense: true}, nil); r.kind != wire.KindNotReady || !strings.Contains(r.msg, "not initialised") {
		t.Fatalf("pull before Init: %+v", r)
	}
	initDense(t, s, false, 2)
	nan := float32(math.NaN())
	for _, tc := range []struct {
		build func(f *wire.Frame)
		want  string
	}{
		{func(f *wire.Frame) { f.Dense("nope", []float32{1}) }, `unknown variable "nope"`},
		{func(f *wire.Frame) { f.Dense("w", []float32{1, 2, 3}) }, `variable "w": gradient has 12 bytes, want 8`},
		{func(f *wire.Frame) { f.Dense("w", []float32{1, 1}); f.Dense("w", []float32{1, 1}) }, `variable "w" pushed twice`},
		{func(f *wire.Frame) { f.Dense("w", []float32{1, 1}); f.Dense("b", []float32{nan}) }, `variable "b": gradient element 0 is NaN`},
		{func(f *wire.Frame) {
			f.SparsePush("emb", wire.KeysInline, wire.NoSlot, 2, []uint64{1, 2}, []float32{1, 2, 3, float32(math.Inf(1))})
		}, `table "emb": gradient of key 2 element 1 is +Inf`},
		{func(f *wire.Frame) {
			f.SparsePush("emb", wire.KeysInline, wire.NoSlot, 2, []uint64{1, 2}, []float32{1, 2, 3})
		}, `table "emb": 2 keys of dim 2 need 16 bytes of gradients, got 12`},
		{func(f *wire.Frame) { f.SparsePush("nope", wire.KeysInline, wire.NoSlot, 1, []uint64{1}, []float32{1}) }, `unknown table "nope"`},
	} {
		r := rc.do(wire.ReqHeader{Op: wire.OpPushPull, PullDense: true}, tc.build)
		if r.kind != wire.KindInvalid || !strings.Contains(r.msg, tc.want) {
			t.Errorf("got %v %q, want an invalid request mentioning %q", r.kind, r.msg, tc.want)
		}
	}
	// Out of range worker: the tracker's error.
	if r := rc.do(wire.ReqHeader{Op: wire.OpPush, Worker: 7}, nil); r.kind != wire.KindInvalid || !strings.Contains(r.msg, "worker 7 out of range") {
		t.Errorf("worker 7: %v %q", r.kind, r.msg)
	}
	r := rc.do(wire.ReqHeader{Op: wire.OpPull, PullDense: true}, nil)
	if r.Err || r.Step != 0 || r.dense["w"][0] != 1 || r.dense["w"][1] != 2 || r.dense["b"][0] != 0.5 {
		t.Fatalf("a rejected push changed the shard: %+v", r)
	}
	st, _ := s.Status(context.Background(), &pb.StatusRequest{})
	if st.RejectedPushes != 8 {
		t.Fatalf("rejected pushes = %d, want 8", st.RejectedPushes)
	}
	// The connection and the ps carry on.
	r = rc.do(wire.ReqHeader{Op: wire.OpPushPull, PullDense: true}, func(f *wire.Frame) {
		f.Dense("w", []float32{2, 2})
		f.Dense("b", []float32{1})
	})
	if r.Err || r.Step != 1 || r.dense["w"][0] != 0 || r.dense["b"][0] != 0 {
		t.Fatalf("good push after the bad ones: %+v", r)
	}
}

// With two ps, keys of the other ps are refused, whether sent or kept.
func TestDataPathKeyOwnership(t *testing.T) {
	s := New(Config{Task: 0, NumPS: 2, NumWorkers: 1})
	addr := serveTCP(t, s)
	initDense(t, s, false, 1)
	var mine, theirs uint64
	for k := uint64(1); mine == 0 || theirs == 0; k++ {
		if placement.KeyShard(k, 2) == 0 {
			mine = k
		} else {
			theirs = k
		}
	}
	rc := dialRaw(t, addr)
	r := rc.do(wire.ReqHeader{Op: wire.OpPush}, func(f *wire.Frame) {
		f.SparsePush("emb", wire.KeysInline, 0, 2, []uint64{mine, theirs}, []float32{1, 1, 1, 1})
	})
	if r.kind != wire.KindInvalid || !strings.Contains(r.msg, "belongs to ps 1, not ps 0") {
		t.Fatalf("push of a key of ps 1: %v %q", r.kind, r.msg)
	}
	// The slot was filled, but its keys were never accepted.
	r = rc.do(wire.ReqHeader{Op: wire.OpPull}, func(f *wire.Frame) { f.SparsePull("emb", wire.KeysCached, 0, 2, nil) })
	if r.kind != wire.KindInvalid || !strings.Contains(r.msg, "belongs to ps 1") {
		t.Fatalf("pull of the kept set: %v %q", r.kind, r.msg)
	}
	r = rc.do(wire.ReqHeader{Op: wire.OpPushPull}, func(f *wire.Frame) {
		f.SparsePush("emb", wire.KeysInline, 1, 1, []uint64{mine}, []float32{2, 4})
		f.SparsePull("emb", wire.KeysAsPush, 0, 1, nil)
	})
	if r.Err || len(r.rows) != 1 || r.rows[0][0] != -1 || r.rows[0][1] != -2 {
		t.Fatalf("push+pull of a key of ps 0: %+v", r)
	}
}

// Key cache slots: kept keys are named later by slot; a slot the
// connection does not hold is a cache miss (nothing applied, not
// counted as a rejected push); a request may not refill a slot it named.
func TestDataPathKeyCache(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	addr := serveTCP(t, s)
	initDense(t, s, false, 1)
	rc := dialRaw(t, addr)
	keys := []uint64{5, 6, 7}
	if r := rc.do(wire.ReqHeader{Op: wire.OpPush}, func(f *wire.Frame) {
		f.SparsePush("emb", wire.KeysInline, 3, 3, keys, []float32{1, 1, 1, 1, 1, 1})
	}); r.Err {
		t.Fatalf("push keeping slot 3: %q", r.msg)
	}
	r := rc.do(wire.ReqHeader{Op: wire.OpPushPull}, func(f *wire.Frame) {
		f.SparsePush("emb", wire.KeysCached, 3, 3, nil, []float32{1, 1, 1, 1, 1, 1})
		f.SparsePull("emb", wire.KeysCached, 3, 3, nil)
	})
	if r.Err || r.rows[0][0] != -1 || r.rows[0][5] != -1 {
		t.Fatalf("push+pull by slot: %+v %q", r.rows, r.msg)
	}
	for _, tc := range []struct {
		build func(f *wire.Frame)
		kind  wire.ErrorKind
		want  string
	}{
		{func(f *wire.Frame) { f.SparsePush("emb", wire.KeysCached, 4, 3, nil, []float32{1, 1, 1, 1, 1, 1}) }, wire.KindCacheMiss, "key cache miss"},
		{func(f *wire.Frame) { f.SparsePush("emb", wire.KeysCached, 3, 2, nil, []float32{1, 1, 1, 1}) }, wire.KindCacheMiss, "key cache miss"},
		{func(f *wire.Frame) {
			f.SparsePush("emb", wire.KeysCached, 3, 3, nil, []float32{1, 1, 1, 1, 1, 1})
			f.SparsePull("emb", wire.KeysInline, 3, 1, []uint64{9})
		}, wire.KindInvalid, "after using it"},
	} {
		r := rc.do(wire.ReqHeader{Op: wire.OpPushPull}, tc.build)
		if r.kind != tc.kind || !strings.Contains(r.msg, tc.want) {
			t.Errorf("got %v %q, want %v mentioning %q", r.kind, r.msg, tc.kind, tc.want)
		}
	}
	st, _ := s.Status(context.Background(), &pb.StatusRequest{})
	if st.RejectedPushes != 0 || st.AppliedPushes != 2 {
		t.Fatalf("status %+v: cache misses must not apply or count as rejected", st)
	}
}

// A malformed frame gets an error reply, then its connection is closed;
// the ps goes on serving others, and gRPC on the same port.
func TestDataPathMalformedFrame(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	addr := serveTCP(t, s)
	initDense(t, s, false, 1)
	bad := dialRaw(t, addr)
	var hdr [wire.ReqHeaderLen]byte
	wire.ReqHeader{Op: wire.OpPull}.Put(hdr[:])
	hdr[0] = 77
	if _, err := bad.c.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	if r := bad.read(); r.kind != wire.KindMalformed || !strings.Contains(r.msg, "unknown op 77") {
		t.Fatalf("reply to a bad frame: %v %q", r.kind, r.msg)
	}
	if _, err := bad.br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("connection after a bad frame: %v, want EOF", err)
	}
	good := dialRaw(t, addr)
	if r := good.do(wire.ReqHeader{Op: wire.OpPull, PullDense: true}, nil); r.Err || len(r.dense) != 2 {
		t.Fatalf("another connection: %+v", r)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := pb.NewParamServerClient(conn).Status(ctx, &pb.StatusRequest{}); err != nil || !st.Initialized {
		t.Fatalf("gRPC on the same port: %v %v", st, err)
	}
	// A connection that opens with bytes that are neither goes to gRPC,
	// which drops it; the ps is unharmed.
	junk, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	junk.Write([]byte("GET / HTTP/1.1\r\nHost: ps\r\n\r\n")) // as long as an HTTP/2 preface
	junk.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, junk)
	junk.Close()
	if r := good.do(wire.ReqHeader{Op: wire.OpPull, PullDense: true}, nil); r.Err {
		t.Fatalf("after junk: %q", r.msg)
	}
}

// A synchronous pull that waits for its step is answered once the step
// completes, and a data-path push from another worker completes it.
func TestDataPathSyncWait(t *testing.T) {
	s := New(Config{NumWorkers: 2})
	addr := serveTCP(t, s)
	initDense(t, s, true, 2)
	w0, w1 := dialRaw(t, addr), dialRaw(t, addr)
	push := func(f *wire.Frame) { f.Dense("w", []float32{1, 1}); f.Dense("b", []float32{1}) }
	got := make(chan reply, 1)
	go func() {
		got <- w0.do(wire.ReqHeader{Op: wire.OpPushPull, PullDense: true, Worker: 0, Step: 0, MinStep: 1}, push)
	}()
	select {
	case r := <-got:
		t.Fatalf("pull of step 1 answered with one gradient of two: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	r1 := w1.do(wire.ReqHeader{Op: wire.OpPushPull, PullDense: true, Worker: 1, Step: 0, MinStep: 1}, func(f *wire.Frame) {
		f.Dense("w", []float32{3, 3})
		f.Dense("b", []float32{3})
	})
	r0 := <-got
	for _, r := range []reply{r0, r1} {
		// average gradient w = [2 2], b = 2; lr 0.5: w = [0 1], b = -0.5
		if r.Err || r.Step != 1 || r.dense["w"][0] != 0 || r.dense["w"][1] != 1 || r.dense["b"][0] != -0.5 {
			t.Fatalf("sync step: %+v", r)
		}
	}
	// A stale push is dropped, and its pull still answered.
	r := w1.do(wire.ReqHeader{Op: wire.OpPushPull, PullDense: true, Worker: 1, Step: 0, MinStep: 1}, push)
	if r.Err || !r.Dropped || r.Step != 1 {
		t.Fatalf("stale push: %+v", r)
	}
}

// A worker that goes away while its pull waits for a step ends the wait,
// as a cancelled gRPC call does.
func TestDataPathWaitEndsWhenWorkerLeaves(t *testing.T) {
	var mu sync.Mutex
	waits := 0
	s := New(Config{NumWorkers: 2, WaitLogEvery: 5 * time.Millisecond, Logf: func(f string, _ ...any) {
		if strings.Contains(f, "has waited") {
			mu.Lock()
			waits++
			mu.Unlock()
		}
	}})
	addr := serveTCP(t, s)
	initDense(t, s, true, 2)
	rc := dialRaw(t, addr)
	rc.f.Reset(wire.ReqHeaderLen)
	rc.send(rc.f.Request(wire.ReqHeader{Op: wire.OpPull, PullDense: true, MinStep: 5}))
	count := func() int { mu.Lock(); defer mu.Unlock(); return waits }
	for count() == 0 {
		time.Sleep(time.Millisecond)
	}
	rc.c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := count()
		time.Sleep(50 * time.Millisecond)
		if count() == before {
			break // no longer waiting
		}
		if time.Now().After(deadline) {
			t.Fatal("the pull still waits after its worker closed the connection")
		}
	}
	// The ps serves on.
	if r := dialRaw(t, addr).do(wire.ReqHeader{Op: wire.OpPull, PullDense: true}, nil); r.Err {
		t.Fatal(r.msg)
	}
}

// A worker of before DataVersionKinds (asking for versions 1 to 3) gets
// the status codes it reads: a cache miss is Aborted naming it, a shard
// not initialised FailedPrecondition. A version past the newest is refused.
func TestDataPathErrorCodesForOlderWorkers(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	addr := serveTCP(t, s)
	old := dialRawVersion(t, addr, wire.DataVersion)
	if r := old.do(wire.ReqHeader{Op: wire.OpPull, PullDense: true}, nil); r.code != codes.FailedPrecondition || !strings.Contains(r.msg, "not initialised") {
		t.Fatalf("pull before Init: %v %q, want FailedPrecondition", r.code, r.msg)
	}
	initDense(t, s, false, 1)
	r := old.do(wire.ReqHeader{Op: wire.OpPush}, func(f *wire.Frame) {
		f.SparsePush("emb", wire.KeysCached, 4, 3, nil, []float32{1, 1, 1, 1, 1, 1})
	})
	if r.code != codes.Aborted || !strings.Contains(r.msg, "key cache miss") {
		t.Fatalf("cache miss: %v %q, want Aborted naming it", r.code, r.msg)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(wire.PrefaceVersion(wire.DataVersionIncarnation + 1)); err != nil {
		t.Fatal(err)
	}
	var hb [wire.HelloLen]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		t.Fatal(err)
	}
	if h, err := wire.ParseHello(hb[:]); err != nil || h.Status != wire.HelloBadVersion {
		t.Fatalf("hello to version %d: %+v, %v; want a refusal", wire.DataVersionIncarnation+1, h, err)
	}
}

// fakeReplicated is a replicated service that refuses every push with
// err, as a copy without a majority does.
type fakeReplicated struct{ err error }

func (f fakeReplicated) ReplicatedPush(context.Context, *pb.PushRequest) (*pb.PushResponse, error) {
	return nil, f.err
}
func (f fakeReplicated) ReplicatedServing(context.Context) error { return nil }
func (f fakeReplicated) ReplicatedPulled(context.Context, int32, int64, []PulledRows) error {
	return nil
}

// The replicated service answers with gRPC statuses; the data path gives
// a worker their kinds (Unavailable: wait for the ps), with the status's
// message, and an older worker the same code.
func TestDataPathReplicatedErrorKinds(t *testing.T) {
	s := New(Config{NumWorkers: 1, Replicated: fakeReplicated{status.Error(codes.Unavailable, "shard 0: replicating: no majority")}})
	addr := serveTCP(t, s)
	initDense(t, s, false, 1)
	push := func(f *wire.Frame) { f.Dense("b", []float32{1}) }
	if r := dialRaw(t, addr).do(wire.ReqHeader{Op: wire.OpPush}, push); r.kind != wire.KindUnavailable || r.msg != "shard 0: replicating: no majority" {
		t.Errorf("push: %v %q, want unavailable with the status's message", r.kind, r.msg)
	}
	if r := dialRawVersion(t, addr, wire.DataVersion).do(wire.ReqHeader{Op: wire.OpPush}, push); r.code != codes.Unavailable {
		t.Errorf("push of an older worker: %v %q, want Unavailable", r.code, r.msg)
	}
}
