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
		kind, b := in[0]%8, in[1:]
		var m proto.Message
		switch kind {
		case 0:
			m = &pb.InitRequest{}
		case 1:
			m = &pb.PushRequest{}
		case 2:
			m = &pb.PullRequest{}
		case 3:
			m = &pb.PushPullRequest{}
		case 4:
			m = &pb.CheckpointRequest{}
		case 5:
			m = &pb.RestoreRequest{}
		case 6:
			m = &pb.DoneRequest{}
		default:
			m = &pb.StatusRequest{}
		}
		if proto.Unmarshal(b, m) != nil {
			return
		}
		switch r := m.(type) {
		case *pb.InitRequest:
			_, _ = s.Init(ctx, r)
		case *pb.PushRequest:
			_, _ = s.Push(ctx, r)
		case *pb.PullRequest:
			_, _ = s.Pull(ctx, r)
		case *pb.PushPullRequest:
			_, _ = s.PushPull(ctx, r)
		case *pb.CheckpointRequest:
			_, _ = s.Checkpoint(ctx, r)
		case *pb.RestoreRequest:
			_, _ = s.Restore(ctx, r)
		case *pb.DoneRequest:
			_, _ = s.Done(ctx, r)
		case *pb.StatusRequest:
			_, _ = s.Status(ctx, r)
		}
		st, _ := s.Status(context.Background(), &pb.StatusRequest{})
		if _, err := s.Push(context.Background(), &pb.PushRequest{Worker: 0, Step: st.GlobalStep, Grads: []*pb.DenseTensor{{Name: "w", Data: f32(1, 1)}, {Name: "b", Data: f32(1)}}}); err != nil && st.Initialized && st.Mode == "async" {
			t.Fatalf("after %T: a good push fails: %v", m, err)
		}
	})
}
