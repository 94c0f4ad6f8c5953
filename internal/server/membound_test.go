package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// initVar gives s one dense variable "w" of n values, asynchronous.
func initVar(t *testing.T, s *Server, n int) {
	t.Helper()
	_, err := s.Init(context.Background(), &pb.InitRequest{
		Vars:       []*pb.VarSpec{{Name: "w", Shape: []int64{int64(n)}, Init: f32(make([]float32, n)...)}},
		Optimizer:  &pb.OptimizerConfig{Name: "sgd", LearningRate: 0.5},
		NumWorkers: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitBuffered waits, a bounded number of times, for what the data
// connections hold to come down to at most want (a closing connection
// gives its buffers back from its own goroutine).
func waitBuffered(t *testing.T, s *Server, want int64) {
	t.Helper()
	for i := 0; s.DataBuffered() > want; i++ {
		if i == 2000 {
			t.Fatalf("data connections still hold %d bytes, want at most %d", s.DataBuffered(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Issue 28, item 5: a request larger than the job's layout allows is
// refused from its header, before any of its body is buffered, on every
// connection at once; each connection then goes on. Six connections each
// sending an 8 MiB push to a ps whose one variable has 4 values used to
// buffer all 48 MiB.
func TestDataPathRequestOverLayoutLimit(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	addr := serveTCP(t, s)
	initVar(t, s, 4)
	const conns, big = 6, 2 << 20 // values: 8 MiB a request
	rcs := make([]*rawConn, conns)
	errs := make(chan error, conns)
	for i := range rcs {
		rc := dialRaw(t, addr)
		rcs[i] = rc
		rc.f.Reset(wire.ReqHeaderLen)
		rc.f.Dense("w", make([]float32, big))
		bufs := rc.f.Request(wire.ReqHeader{Op: wire.OpPush})
		// Written while the reply is read: the ps answers from the
		// header and drops the body as it comes.
		go func() { _, err := bufs.WriteTo(rc.c); errs <- err }()
	}
	for i, rc := range rcs {
		r := rc.read()
		if r.kind != wire.KindInvalid || !strings.Contains(r.msg, "over this ps's limit") || !strings.Contains(r.msg, "4 values in 1 variables") {
			t.Fatalf("connection %d: got %v %q, want an invalid request over the layout's limit", i, r.kind, r.msg)
		}
		if i == 0 {
			t.Log(r.msg)
		}
		if held := s.DataBuffered(); held > int64(conns)*preInitBody {
			t.Fatalf("the data connections hold %d bytes after refusing every request", held)
		}
	}
	for range rcs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, rc := range rcs {
		r := rc.do(wire.ReqHeader{Op: wire.OpPushPull, PullDense: true}, func(f *wire.Frame) { f.Dense("w", []float32{1, 1, 1, 1}) })
		if r.Err || len(r.dense["w"]) != 4 {
			t.Fatalf("connection %d after its refused request: %+v", i, r)
		}
	}
	for _, rc := range rcs {
		rc.c.Close()
	}
	waitBuffered(t, s, 0)
}

// Issue 28, item 5: what all data connections hold together is bounded
// (Config.MaxBuffered): a request past it is answered Unavailable at once,
// and a connection's buffers count until it closes, when they are given
// back and another connection's request goes through.
func TestDataPathBuffersBoundedAcrossConnections(t *testing.T) {
	const n = 256 << 10 // 1 MiB a push
	s := New(Config{NumWorkers: 1, MaxBuffered: 3 << 20})
	addr := serveTCP(t, s)
	initVar(t, s, n)
	push := func(rc *rawConn) reply {
		return rc.do(wire.ReqHeader{Op: wire.OpPush}, func(f *wire.Frame) { f.Dense("w", make([]float32, n)) })
	}
	var rcs []*rawConn
	for i := range 6 {
		rc := dialRaw(t, addr)
		rcs = append(rcs, rc)
		r := push(rc)
		switch {
		case i < 2 && r.Err:
			t.Fatalf("push %d within the bound: %v %q", i, r.kind, r.msg)
		case i >= 2 && (r.kind != wire.KindUnavailable || !strings.Contains(r.msg, "over the limit of 3145728")):
			t.Fatalf("push %d past the bound: %+v, want Unavailable naming the limit", i, r)
		}
		if held := s.DataBuffered(); held > 3<<20 {
			t.Fatalf("after push %d the data connections hold %d bytes, over the bound", i, held)
		}
	}
	// The first connection goes: its megabyte is given back, and the
	// third connection's push, sent again, goes through.
	rcs[0].c.Close()
	waitBuffered(t, s, 2<<20)
	if r := push(rcs[2]); r.Err {
		t.Fatalf("push after a connection closed: %v %q", r.kind, r.msg)
	}
	for _, rc := range rcs {
		rc.c.Close()
	}
	waitBuffered(t, s, 0)
}

// sendPieces sends req to ps's call of the same name in pieces, as a
// client does with a request over wire.GRPCPiece bytes; chop, if set,
// changes the pieces before they are sent.
func sendPieces[Resp any](t *testing.T, open func(context.Context, ...grpc.CallOption) (grpc.ClientStreamingClient[pb.Piece, Resp], error), req proto.Message) (*Resp, error) {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	st, err := open(context.Background())
	if err != nil {
		return nil, err
	}
	for off := 0; off < len(b); off += wire.GRPCPiece {
		p := &pb.Piece{Data: b[off:min(off+wire.GRPCPiece, len(b))]}
		if off == 0 {
			p.Size = int64(len(b))
		}
		if st.Send(p) != nil {
			break
		}
	}
	return st.CloseAndRecv()
}

// waitGRPC waits, a bounded number of times, for what the gRPC calls hold
// to come down to at most want (a stream's end gives its part back from
// another goroutine).
func waitGRPC(t *testing.T, s *Server, want int64) {
	t.Helper()
	for i := 0; s.GRPCBuffered() > want; i++ {
		if i == 2000 {
			t.Fatalf("gRPC calls still hold %d bytes, want at most %d", s.GRPCBuffered(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Issue 28, item 5: a gRPC request is bounded before gRPC reads it. A
// message over wire.GRPCMaxMessage is refused from its length prefix; a
// larger request comes in pieces, whose declared size is held to the
// layout as a data-path request is: before Init a pull is answered not
// initialised, Init may be large, and after it a push larger than every
// variable's values is refused naming the limit and the layout. Each
// connection goes on, and nothing stays held. Before, gRPC's fixed 1 GiB
// was the only bound before a message was read whole.
func TestGRPCRequestOverLayoutLimit(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	addr := serveTCP(t, s)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ps := pb.NewParamServerClient(conn)
	ctx := context.Background()
	const big = 2 << 20 // values: 8 MiB
	if _, err := ps.Push(ctx, &pb.PushRequest{Grads: []*pb.DenseTensor{{Name: "w", Data: make([]byte, 2<<20)}}}); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "received message larger than max") {
		t.Fatalf("a 2 MiB push sent whole: %v, want it refused by gRPC's limit", err)
	}
	pull := &pb.PullRequest{Names: []string{strings.Repeat("w", 2*preInitBody)}}
	if _, err := sendPieces(t, ps.PullPieces, pull); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not initialized") && !strings.Contains(err.Error(), "not initialised") {
		t.Fatalf("a 2 MiB pull in pieces before Init: %v, want it answered not initialised", err)
	}
	if _, err := sendPieces(t, ps.InitPieces, &pb.InitRequest{
		Vars:       []*pb.VarSpec{{Name: "w", Shape: []int64{big}, Init: f32(make([]float32, big)...)}, {Name: "b", Shape: []int64{4}, Init: f32(0, 0, 0, 0)}},
		Optimizer:  &pb.OptimizerConfig{Name: "sgd", LearningRate: 0.5},
		NumWorkers: 1,
	}); err != nil {
		t.Fatalf("an Init of 8 MiB in pieces: %v", err)
	}
	push := func(w, b int) error {
		_, err := sendPieces(t, ps.PushPieces, &pb.PushRequest{Grads: []*pb.DenseTensor{
			{Name: "w", Data: f32(make([]float32, w)...)}, {Name: "b", Data: f32(make([]float32, b)...)}}})
		return err
	}
	if err := push(big, 4); err != nil {
		t.Fatalf("a push of every value: %v", err)
	}
	err = push(big, big)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "a Push request of") || !strings.Contains(err.Error(), "is over this ps's limit") || !strings.Contains(err.Error(), "2097156 values in 2 variables") {
		t.Fatalf("a push of 16 MiB to a layout of 8: %v, want it refused naming the limit and the layout", err)
	}
	t.Log(err)
	if err := push(big, 4); err != nil {
		t.Fatalf("a push after the refused one: %v", err)
	}
	waitGRPC(t, s, 0)
}

// Issue 28, item 5: what all gRPC calls hold together is bounded
// (Config.MaxGRPCBuffered), counted from when each stream opens, before
// gRPC reads any of it: with room for two streams, a third call is refused
// at once with ResourceExhausted and the reason BUSY, naming the bound;
// once the first two end, what they held is given back and a call goes
// through.
func TestGRPCCallsBoundedTogether(t *testing.T) {
	s := New(Config{NumWorkers: 1, MaxGRPCBuffered: 2*grpcStreamCost + grpcStreamCost/2})
	addr := serveTCP(t, s)
	initVar(t, s, 4)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ps := pb.NewParamServerClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	// Two calls that send the first piece of a request and then nothing:
	// each holds its stream's part until it ends.
	for i := range 2 {
		st, err := ps.PushPieces(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&pb.Piece{Size: 100, Data: []byte{1}}); err != nil {
			t.Fatal(err)
		}
		for j := 0; s.GRPCBuffered() < int64(i+1)*grpcStreamCost; j++ {
			if j == 2000 {
				t.Fatalf("call %d: the gRPC calls hold %d bytes", i, s.GRPCBuffered())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	_, err = ps.Status(context.Background(), &pb.StatusRequest{})
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "over the limit of") {
		t.Fatalf("a third call: %v, want ResourceExhausted naming the bound", err)
	} else if len(st.Details()) != 1 || st.Details()[0].(*errdetails.ErrorInfo).Reason != wire.ReasonBusy {
		t.Fatalf("a third call: details %v, want the reason %s", st.Details(), wire.ReasonBusy)
	}
	t.Log(err)
	if held := s.GRPCBuffered(); held > 2*grpcStreamCost+200 {
		t.Fatalf("the gRPC calls hold %d bytes, over the bound", held)
	}
	cancel()
	waitGRPC(t, s, 0)
	if _, err := ps.Status(context.Background(), &pb.StatusRequest{}); err != nil {
		t.Fatalf("a call once the others ended: %v", err)
	}
	waitGRPC(t, s, 0)
}
