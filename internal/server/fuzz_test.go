package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/wire/pb"
)

// FuzzRequests decodes arbitrary bytes as each request the ps's gRPC
// service takes (Init, Push with dense and sparse parts, Pull, PushPull,
// Checkpoint, Restore, Done, Status) and serves them, in turn, to one ps:
// whatever comes, the ps answers with an error or a result and never
// panics, and afterwards still serves a well-formed push and pull. Seeds
// are real requests, an Init whose shape overflows, and an empty one.
func FuzzRequests(f *testing.F) {
	seed := func(kind byte, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{kind}, b...))
	}
	seed(0, &pb.InitRequest{Vars: []*pb.VarSpec{{Name: "w", Shape: []int64{1<<62 + 1}, Init: f32(1)}}, NumWorkers: 1})
	seed(0, &pb.InitRequest{Vars: []*pb.VarSpec{{Name: "x", Shape: []int64{2}, Init: f32(1, 2)}}, Tables: []*pb.TableSpec{{Name: "t", Dim: 2}}, NumWorkers: 1, Optimizer: &pb.OptimizerConfig{Name: "adam"}})
	seed(1, &pb.PushRequest{Grads: []*pb.DenseTensor{{Name: "w", Data: f32(1, 2)}, {Name: "b", Data: f32(1)}}})
	seed(1, &pb.PushRequest{Sparse: []*pb.SparseRows{{Table: "emb", Keys: make([]byte, 16), Values: f32(1, 2, 3, 4)}}})
	seed(2, &pb.PullRequest{Names: []string{"w"}, Sparse: []*pb.SparseRows{{Table: "emb", Keys: make([]byte, 8)}}})
	seed(3, &pb.PushPullRequest{Push: &pb.PushRequest{Grads: []*pb.DenseTensor{{Name: "b", Data: f32(1)}}}, Pull: &pb.PullRequest{}})
	seed(4, &pb.CheckpointRequest{Dir: "../../etc", Step: -1, NumShards: 1})
	seed(5, &pb.RestoreRequest{Dir: "/", Step: 7})
	seed(6, &pb.DoneRequest{Worker: 5})
	f.Add([]byte{7})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		s := New(Config{NumWorkers: 2, CheckpointDir: dir})
		if _, err := s.Init(context.Background(), &pb.InitRequest{
			Vars:       []*pb.VarSpec{{Name: "w", Shape: []int64{2}, Init: f32(1, 2)}, {Name: "b", Shape: []int64{1}, Init: f32(0.5)}},
			Tables:     []*pb.TableSpec{{Name: "emb", Dim: 2}},
			Optimizer:  &pb.OptimizerConfig{Name: "sgd", LearningRate: 0.5},
			NumWorkers: 2,
		}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		r := requests[int(in[0])%len(requests)]
		m := r.msg()
		if proto.Unmarshal(in[1:], m) != nil {
			return
		}
		r.serve(ctx, s, m)
		st, _ := s.Status(context.Background(), &pb.StatusRequest{})
		if _, err := s.Push(context.Background(), &pb.PushRequest{Worker: 0, Step: st.GlobalStep, Grads: []*pb.DenseTensor{{Name: "w", Data: f32(1, 1)}, {Name: "b", Data: f32(1)}}}); err != nil && st.Initialized && st.Mode == "async" {
			t.Fatalf("after %T: a good push fails: %v", m, err)
		}
	})
}

// requests are the ps's gRPC requests as FuzzRequests picks them by their
// first byte: a fresh message, and the call that serves it.
var requests = []struct {
	msg   func() proto.Message
	serve func(context.Context, *Server, proto.Message)
}{
	{func() proto.Message { return &pb.InitRequest{} }, func(ctx context.Context, s *Server, m proto.Message) { _, _ = s.Init(ctx, m.(*pb.InitRequest)) }},
	{func() proto.Message { return &pb.PushRequest{} }, func(ctx context.Context, s *Server, m proto.Message) { _, _ = s.Push(ctx, m.(*pb.PushRequest)) }},
	{func() proto.Message { return &pb.PullRequest{} }, func(ctx context.Context, s *Server, m proto.Message) { _, _ = s.Pull(ctx, m.(*pb.PullRequest)) }},
	{func() proto.Message { return &pb.PushPullRequest{} }, func(ctx context.Context, s *Server, m proto.Message) { _, _ = s.PushPull(ctx, m.(*pb.PushPullRequest)) }},
	{func() proto.Message { return &pb.CheckpointRequest{} }, func(ctx context.Context, s *Server, m proto.Message) {
		_, _ = s.Checkpoint(ctx, m.(*pb.CheckpointRequest))
	}},
	{func() proto.Message { return &pb.RestoreRequest{} }, func(ctx context.Context, s *Server, m proto.Message) { _, _ = s.Restore(ctx, m.(*pb.RestoreRequest)) }},
	{func() proto.Message { return &pb.DoneRequest{} }, func(ctx context.Context, s *Server, m proto.Message) { _, _ = s.Done(ctx, m.(*pb.DoneRequest)) }},
	{func() proto.Message { return &pb.StatusRequest{} }, func(ctx context.Context, s *Server, m proto.Message) { _, _ = s.Status(ctx, m.(*pb.StatusRequest)) }},
}
