package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// pipeListener is a listener whose connections are in-memory pipes, so
// that the race detector sees every byte a reply reads: net.Pipe copies in
// Go where a socket copies in the kernel.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial() net.Conn {
	c, s := net.Pipe()
	l.conns <- s
	return c
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

func servePipe(t *testing.T, s *Server) *pipeListener {
	t.Helper()
	l := newPipeListener()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ServeListener(ctx, l, s); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// Pushes and pulls of a large variable on several connections at once,
// over pipes: under -race, a reply read from a buffer that a push updates
// is a reported race, and every reply must hold one step's values (all
// elements equal, as every gradient is uniform).
func TestRepliesNeverReadBuffersBeingUpdated(t *testing.T) {
	const n = pipeChunk + 1000 // pipelined, in two chunks
	s := New(Config{NumWorkers: 3})
	l := servePipe(t, s)
	// momentum: pure Go, so the race detector sees its writes.
	if _, err := s.Init(context.Background(), &pb.InitRequest{
		Vars:       []*pb.VarSpec{{Name: "w", Shape: []int64{n}, Init: make([]byte, 4*n)}},
		Optimizer:  &pb.OptimizerConfig{Name: "momentum", LearningRate: 0.5, Momentum: 0.5},
		NumWorkers: 3,
	}); err != nil {
		t.Fatal(err)
	}
	grad := make([]float32, n)
	for i := range grad {
		grad[i] = 1
	}
	rounds := 30
	if testing.Short() {
		rounds = 10
	}
	var wg sync.WaitGroup
	for w, op := range []wire.Op{wire.OpPushPull, wire.OpPull, wire.OpPush} {
		rc := &rawConn{t: t, c: l.dial()}
		wg.Go(func() {
			defer rc.c.Close()
			rc.br = newReader(rc.c)
			if _, err := rc.c.Write(wire.Preface()); err != nil {
				t.Error(err)
				return
			}
			hello := make([]byte, wire.HelloLen)
			if _, err := io.ReadFull(rc.br, hello); err != nil {
				t.Error(err)
				return
			}
			for range rounds {
				rc.f.Reset(wire.ReqHeaderLen)
				if op.Push() {
					rc.f.Dense("w", grad)
				}
				rc.send(rc.f.Request(wire.ReqHeader{Op: op, PullDense: op.Pull(), Worker: int32(w)}))
				r := rc.read()
				if r.Err {
					t.Errorf("worker %d: %s", w, r.msg)
					return
				}
				if v := r.dense["w"]; op.Pull() {
					for i := range v {
						if v[i] != v[0] {
							t.Errorf("worker %d read a torn value: element %d is %v, element 0 %v", w, i, v[i], v[0])
							return
						}
					}
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		t.Fatal("the workers' requests did not all finish within 2 minutes")
	}
}

// The data path allocates nothing per request once its buffers have
// grown: dense and sparse pushes and pulls, pipelined or not.
func TestDataPathSteadyStateAllocatesNothing(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	l := servePipe(t, s)
	const big = pipeMin + 8
	if _, err := s.Init(context.Background(), &pb.InitRequest{
		Vars:       []*pb.VarSpec{{Name: "small", Shape: []int64{10}, Init: make([]byte, 40)}, {Name: "big", Shape: []int64{big}, Init: make([]byte, 4*big)}},
		Tables:     []*pb.TableSpec{{Name: "emb", Dim: 4}},
		Optimizer:  &pb.OptimizerConfig{Name: "sgd", LearningRate: 0.1},
		NumWorkers: 1,
	}); err != nil {
		t.Fatal(err)
	}
	c := l.dial()
	defer c.Close()
	br := newReader(c)
	if _, err := c.Write(wire.Preface()); err != nil {
		t.Fatal(err)
	}
	hello := make([]byte, wire.HelloLen)
	if _, err := io.ReadFull(br, hello); err != nil {
		t.Fatal(err)
	}
	keys := make([]uint64, 1000)
	for i := range keys {
		keys[i] = uint64(i * 7919)
	}
	small, bigGrad, rows := make([]float32, 10), make([]float32, big), make([]float32, 4*len(keys))
	var f wire.Frame
	reply := make([]byte, 8<<20)
	round := func(build func(), h wire.ReqHeader) {
		f.Reset(wire.ReqHeaderLen)
		build()
		f.Request(h)
		if _, err := f.WriteTo(c); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(br, reply[:wire.RepHeaderLen]); err != nil {
			t.Fatal(err)
		}
		rh, err := wire.ParseRepHeader(reply[:wire.RepHeaderLen])
		if err != nil || rh.Err {
			t.Fatalf("reply %+v %v", rh, err)
		}
		if _, err := io.ReadFull(br, reply[:rh.Body]); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		build func()
		h     wire.ReqHeader
	}{
		{"dense push+pull", func() { f.Dense("small", small); f.Dense("big", bigGrad) }, wire.ReqHeader{Op: wire.OpPushPull, PullDense: true}},
		{"dense push", func() { f.Dense("small", small); f.Dense("big", bigGrad) }, wire.ReqHeader{Op: wire.OpPush}},
		{"dense pull", func() {}, wire.ReqHeader{Op: wire.OpPull, PullDense: true}},
		{"sparse push+pull", func() {
			f.SparsePush("emb", wire.KeysCached, 0, len(keys), nil, rows)
			f.SparsePull("emb", wire.KeysAsPush, 0, len(keys), nil)
		}, wire.ReqHeader{Op: wire.OpPushPull}},
		{"sparse keys sent", func() {
			f.SparsePush("emb", wire.KeysInline, wire.NoSlot, len(keys), keys, rows)
			f.SparsePull("emb", wire.KeysInline, wire.NoSlot, len(keys), keys)
		}, wire.ReqHeader{Op: wire.OpPushPull}},
	}
	// Keep the key set in slot 0, and warm every buffer up.
	round(func() { f.SparsePush("emb", wire.KeysInline, 0, len(keys), keys, rows) }, wire.ReqHeader{Op: wire.OpPush})
	for _, tc := range cases {
		round(tc.build, tc.h)
	}
	for _, tc := range cases {
		if a := testing.AllocsPerRun(20, func() { round(tc.build, tc.h) }); a != 0 {
			t.Errorf("%s: %v allocations per request", tc.name, a)
		}
	}
}

func newReader(c net.Conn) *bufio.Reader { return bufio.NewReaderSize(c, 64<<10) }

// Which dense pushes are pipelined: a push alone from pipeMin values (its
// acknowledgement goes before the update), a push+pull only from more than
// one chunk (with one, nothing would overlap the writing).
func TestPipelinable(t *testing.T) {
	for _, tc := range []struct {
		n    int
		op   wire.Op
		want bool
	}{
		{pipeMin - 1, wire.OpPush, false},
		{pipeMin, wire.OpPush, true},
		{pipeMin, wire.OpPushPull, false},
		{pipeChunk, wire.OpPushPull, false},
		{pipeChunk + 1, wire.OpPushPull, true},
	} {
		s := New(Config{NumWorkers: 1})
		if _, err := s.Init(context.Background(), &pb.InitRequest{
			Vars:       []*pb.VarSpec{{Name: "w", Shape: []int64{int64(tc.n)}, Init: make([]byte, 4*tc.n)}},
			Optimizer:  &pb.OptimizerConfig{Name: "sgd", LearningRate: 1},
			NumWorkers: 1,
		}); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		dc := &dataConn{}
		dc.req.Op, dc.req.PullDense = tc.op, tc.op.Pull()
		dc.push.Dense = []shard.DenseGrad{{Name: []byte("w"), Values: make([]float32, tc.n)}}
		got := s.pipelinable(dc)
		s.mu.Unlock()
		if got != tc.want {
			t.Errorf("%d values, op %d: pipelined %v, want %v", tc.n, tc.op, got, tc.want)
		}
	}
}

// A variable's update is spread over the cores only from parallelMin
// values: below, one goroutine does it.
func TestUpdateWorkers(t *testing.T) {
	if got := updateRunner(256 << 10).Width(); got != 1 {
		t.Errorf("a 1 MiB variable is updated by %d goroutines, want 1", got)
	}
	if got, want := updateRunner(parallelMin).Width(), runtime.GOMAXPROCS(0); got != want {
		t.Errorf("a variable of parallelMin values is updated by %d goroutines, want GOMAXPROCS = %d", got, want)
	}
}
