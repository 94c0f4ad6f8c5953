package client

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// A call the ps refuses because its gRPC calls hold all they may (BUSY) is
// tried again: while another client's stalled call holds the ps's bound,
// Status waits, and it is answered once that call ends. Without the
// retries it failed at once with ResourceExhausted.
func TestBusyCallTriedAgain(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := server.New(server.Config{NumWorkers: 1, MaxGRPCBuffered: 6 << 20})
	done := make(chan struct{})
	go func() { server.ServeListener(ctx, lis, s); close(done) }()
	defer func() { cancel(); <-done }()

	c, err := New([]string{lis.Addr().String()}, []model.Variable{{Name: "w", Shape: []int{3}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Another caller's request in pieces that stops after its first piece
	// holds more than half the bound.
	stallCtx, stall := context.WithCancel(context.Background())
	st, err := pb.NewParamServerClient(c.Conn(0)).PushPieces(stallCtx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.Piece{Size: 100, Data: []byte{1}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; s.GRPCBuffered() < 4<<20; i++ {
		if i == 2000 {
			t.Fatalf("the stalled call holds %d bytes", s.GRPCBuffered())
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.AfterFunc(300*time.Millisecond, stall)
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatalf("Status while another call held the bound, then once it ended: %v", err)
	}
}
