package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/paramserv/paramserv/internal/version"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// A Status call that asks to wait for Init is answered when Init comes, not
// when its wait runs out; one that does not ask is answered at once; one
// whose wait runs out is answered uninitialised.
func TestStatusWaitsForInit(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(version.WaitInitHeader, "10s"))
	if st, err := s.Status(context.Background(), &pb.StatusRequest{}); err != nil || st.Initialized {
		t.Fatalf("status without waiting: %v, %v", st, err)
	}
	short := metadata.NewIncomingContext(context.Background(), metadata.Pairs(version.WaitInitHeader, "20ms"))
	if st, err := s.Status(short, &pb.StatusRequest{}); err != nil || st.Initialized {
		t.Fatalf("status after a 20ms wait with no Init: %v, %v", st, err)
	}
	type answer struct {
		st  *pb.StatusResponse
		err error
		at  time.Time
	}
	got := make(chan answer, 1)
	go func() {
		st, err := s.Status(ctx, &pb.StatusRequest{})
		got <- answer{st, err, time.Now()}
	}()
	time.Sleep(20 * time.Millisecond) // let the call wait; if it has not yet, it sees Init at once
	_, err := s.Init(context.Background(), &pb.InitRequest{
		Vars:       []*pb.VarSpec{{Name: "w", Shape: []int64{1}, Init: f32(1)}},
		Optimizer:  &pb.OptimizerConfig{Name: "sgd", LearningRate: 0.5},
		NumWorkers: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	inited := time.Now()
	select {
	case a := <-got:
		if a.err != nil || !a.st.Initialized {
			t.Fatalf("status: %v, %v; want initialised", a.st, a.err)
		}
		t.Logf("answered %v after Init returned", a.at.Sub(inited))
	case <-time.After(5 * time.Second):
		t.Fatalf("a Status waiting for Init (up to 10s) was not answered 5s after Init")
	}
}
