package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/vfs"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Each refusal of the gRPC service has the status code and message it had
// when the work built its own statuses, and the work under it returns the
// shard's error of a kind that the code stands for, so that the data
// path sends it as it is.
func TestServiceRefusals(t *testing.T) {
	ctx := context.Background()
	fresh := func() *Server {
		return New(Config{NumWorkers: 1, CheckpointDir: "/ckpt", FS: vfs.NewMem()})
	}
	synced := func() *Server {
		s := New(Config{NumWorkers: 1, CheckpointDir: "/ckpt", FS: vfs.NewMem()})
		if _, err := s.Init(ctx, &pb.InitRequest{
			Vars:      []*pb.VarSpec{{Name: "w", Shape: []int64{1}, Init: f32(1)}},
			Optimizer: &pb.OptimizerConfig{Name: "sgd", LearningRate: 0.1}, Sync: true, NumWorkers: 1, ReplicasToAggregate: 1,
		}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		kind shard.Kind
		msg  string
	}{
		{"init of a ragged value", func() error {
			_, err := fresh().Init(ctx, &pb.InitRequest{Vars: []*pb.VarSpec{{Name: "w", Shape: []int64{1}, Init: []byte{1, 2}}}})
			return err
		}, codes.InvalidArgument, shard.Invalid, `variable "w": 2 bytes of initial values`},
		{"pull before init", func() error {
			_, err := fresh().Pull(ctx, &pb.PullRequest{})
			return err
		}, codes.FailedPrecondition, shard.NotReady, "ps 0: not initialised yet"},
		{"pull of an unknown variable", func() error {
			_, err := synced().Pull(ctx, &pb.PullRequest{Names: []string{"nope"}})
			return err
		}, codes.InvalidArgument, shard.Invalid, `ps 0: unknown variable "nope"`},
		{"push-pull without a pull", func() error {
			_, err := synced().PushPull(ctx, &pb.PushPullRequest{Push: &pb.PushRequest{}})
			return err
		}, codes.InvalidArgument, shard.Invalid, "PushPull needs both push and pull"},
		{"checkpoint of another shard count", func() error {
			_, err := synced().Checkpoint(ctx, &pb.CheckpointRequest{Dir: "/ckpt", NumShards: 2})
			return err
		}, codes.InvalidArgument, shard.Invalid, "ps 0: checkpoint needs a directory and 1 shards"},
		{"checkpoint outside the directory", func() error {
			_, err := synced().Checkpoint(ctx, &pb.CheckpointRequest{Dir: "/elsewhere", NumShards: 1})
			return err
		}, codes.InvalidArgument, shard.Invalid, "ps 0: "},
		{"checkpoint of a negative step", func() error {
			_, err := synced().Checkpoint(ctx, &pb.CheckpointRequest{Dir: "/ckpt", NumShards: 1, Step: -1})
			return err
		}, codes.InvalidArgument, shard.Invalid, "want a step >= 0"},
		{"checkpoint before init", func() error {
			_, err := fresh().Checkpoint(ctx, &pb.CheckpointRequest{Dir: "/ckpt", NumShards: 1})
			return err
		}, codes.FailedPrecondition, shard.NotReady, "ps 0: not initialised yet"},
		{"synchronous checkpoint at another step", func() error {
			_, err := synced().Checkpoint(ctx, &pb.CheckpointRequest{Dir: "/ckpt", NumShards: 1, Step: 5})
			return err
		}, codes.Aborted, shard.Restored, "ps 0 is at step 0, not 5"},
		{"restore of a step not there", func() error {
			_, err := synced().Restore(ctx, &pb.RestoreRequest{Dir: "/ckpt", Step: 7})
			return err
		}, codes.FailedPrecondition, shard.NotReady, "ps 0: checkpoint of step 7 in /ckpt"},
	} {
		err := tc.call()
		st, ok := status.FromError(err)
		if !ok || st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) || strings.Contains(st.Message(), "rpc error") {
			t.Errorf("%s: %v; want %s with %q", tc.name, err, tc.code, tc.msg)
			continue
		}
		if k, _, _ := kindOfStatus(err); k != wire.ErrorKind(tc.kind) {
			t.Errorf("%s: the status reads as kind %v, want %v", tc.name, k, tc.kind)
		}
	}
}
