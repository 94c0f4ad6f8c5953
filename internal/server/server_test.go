package server

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

func f32(vals ...float32) []byte { return wire.Float32Bytes(vals) }

func newServer(t *testing.T, sync bool, replicas, workers int) *Server {
	t.Helper()
	s := New(Config{Task: 0, NumWorkers: workers})
	_, err := s.Init(context.Background(), &pb.InitRequest{
		Vars: []*pb.VarSpec{
			{Name: "w", Shape: []int64{2}, Init: f32(1, 2)},
			{Name: "b", Shape: []int64{1}, Init: f32(0.5)},
		},
		Optimizer:           &pb.OptimizerConfig{Name: "sgd", LearningRate: 0.5},
		Sync:                sync,
		ReplicasToAggregate: int32(replicas),
		NumWorkers:          int32(workers),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pull(t *testing.T, s *Server, minStep int64) (map[string][]float32, int64) {
	t.Helper()
	resp, err := s.Pull(context.Background(), &pb.PullRequest{MinStep: minStep})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, v := range resp.Vars {
		f, _ := wire.Float32s(v.Data)
		out[v.Name] = f
	}
	return out, resp.GlobalStep
}

func push(s *Server, worker int32, step int64, w0, w1, b float32) (*pb.PushResponse, error) {
	return s.Push(context.Background(), &pb.PushRequest{Worker: worker, Step: step, Grads: []*pb.DenseTensor{
		{Name: "w", Data: f32(w0, w1)}, {Name: "b", Data: f32(b)},
	}})
}

func TestAsyncAppliesEachPush(t *testing.T) {
	s := newServer(t, false, 0, 2)
	if _, err := push(s, 0, 0, 1, 1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := push(s, 1, 0, 2, 0, -1); err != nil {
		t.Fatal(err)
	}
	vals, step := pull(t, s, 0)
	// w = [1,2] - 0.5*[1,1] - 0.5*[2,0] = [-0.5, 1.5]; b = 0.5 - 0.5 + 0.5 = 0.5
	if step != 2 || vals["w"][0] != -0.5 || vals["w"][1] != 1.5 || vals["b"][0] != 0.5 {
		t.Fatalf("step %d, values %v", step, vals)
	}
}

func TestSyncAveragesAndDropsStale(t *testing.T) {
	s := newServer(t, true, 2, 3)
	if r, err := push(s, 0, 0, 1, 1, 1); err != nil || r.Dropped || r.GlobalStep != 0 {
		t.Fatalf("first push: %v %v", r, err)
	}
	if r, err := push(s, 2, 0, 3, -1, 1); err != nil || r.Dropped || r.GlobalStep != 1 {
		t.Fatalf("second push: %v %v", r, err)
	}
	// The slowest worker's gradient for step 0 is stale now.
	r, err := push(s, 1, 0, 100, 100, 100)
	if err != nil || !r.Dropped || r.DropReason != "drop-stale" {
		t.Fatalf("late push: %v %v", r, err)
	}
	vals, step := pull(t, s, 1)
	// average grad w = [2, 0], b = 1: w = [1,2] - 0.5*[2,0] = [0, 2]; b = 0.5 - 0.5 = 0
	if step != 1 || vals["w"][0] != 0 || vals["w"][1] != 2 || vals["b"][0] != 0 {
		t.Fatalf("step %d, values %v", step, vals)
	}
	st, _ := s.Status(context.Background(), &pb.StatusRequest{})
	if st.StaleDropped != 1 || st.AppliedPushes != 2 || st.Mode != "sync" {
		t.Fatalf("status %v", st)
	}
}

func TestPullWaitsForStep(t *testing.T) {
	s := newServer(t, true, 2, 2)
	got := make(chan int64)
	go func() {
		_, step := pull(t, s, 1)
		got <- step
	}()
	if _, err := push(s, 0, 0, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case step := <-got:
		t.Fatalf("pull for step 1 answered at step %d with one of two gradients", step)
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := push(s, 1, 0, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case step := <-got:
		if step != 1 {
			t.Fatalf("pull answered at step %d", step)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the pull for step 1 was not answered within 30s of the second gradient")
	}
	// A cancelled wait returns, not a hang, and as Unavailable: a worker
	// that still reads the answer reads it because the ps is stopping (a
	// stopping gRPC server ends its calls' contexts), and recovers where a
	// Canceled would be taken for its own and fail it.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Pull(ctx, &pb.PullRequest{MinStep: 5}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "stopping") {
		t.Fatalf("cancelled pull: %v, want Unavailable, the ps stopping", err)
	}
}

func TestBadPushRejectedAndNothingChanges(t *testing.T) {
	s := newServer(t, false, 0, 2)
	nan := float32(0)
	nan = nan / nan
	for _, tc := range []struct {
		req  *pb.PushRequest
		want string
	}{
		{&pb.PushRequest{Grads: []*pb.DenseTensor{{Name: "nope", Data: f32(1)}}}, `unknown variable "nope"`},
		{&pb.PushRequest{Grads: []*pb.DenseTensor{{Name: "w", Data: f32(1, 2, 3)}}}, `variable "w": gradient has 12 bytes, want 8`},
		{&pb.PushRequest{Grads: []*pb.DenseTensor{{Name: "w", Data: f32(1, 1)}, {Name: "b", Data: f32(nan)}}}, `variable "b": gradient element 0 is NaN`},
		{&pb.PushRequest{Worker: 7}, "worker 7 out of range"},
	} {
		_, err := s.Push(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("push %v: got %v, want InvalidArgument mentioning %q", tc.req, err, tc.want)
		}
	}
	vals, step := pull(t, s, 0)
	if step != 0 || vals["w"][0] != 1 || vals["w"][1] != 2 || vals["b"][0] != 0.5 {
		t.Fatalf("a rejected push changed the shard: step %d values %v", step, vals)
	}
	st, _ := s.Status(context.Background(), &pb.StatusRequest{})
	if st.RejectedPushes != 4 {
		t.Fatalf("rejected pushes = %d, want 4", st.RejectedPushes)
	}
	// The ps carries on.
	if _, err := push(s, 0, 0, 1, 1, 1); err != nil {
		t.Fatal(err)
	}
}

func TestInitTwice(t *testing.T) {
	s := newServer(t, false, 0, 2)
	resp, err := s.Init(context.Background(), &pb.InitRequest{
		Vars:      []*pb.VarSpec{{Name: "w", Shape: []int64{2}}, {Name: "b", Shape: []int64{1}}},
		Optimizer: &pb.OptimizerConfig{Name: "sgd", LearningRate: 0.5}, NumWorkers: 2,
	})
	if err != nil || !resp.AlreadyInitialized {
		t.Fatalf("same layout again: %v %v", resp, err)
	}
	_, err = s.Init(context.Background(), &pb.InitRequest{
		Vars: []*pb.VarSpec{{Name: "w", Shape: []int64{3}}}, NumWorkers: 2,
	})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("different layout: %v", err)
	}
	var conflict bool
	for _, d := range status.Convert(err).Details() {
		ei, ok := d.(*errdetails.ErrorInfo)
		conflict = conflict || ok && ei.Domain == wire.ErrorDomain && ei.Reason == wire.ReasonLayoutConflict
	}
	if !conflict {
		t.Fatalf("different layout: %v, details %v; want the ErrorInfo of a layout conflict", err, status.Convert(err).Details())
	}
	if _, err := New(Config{NumWorkers: 1}).Pull(context.Background(), &pb.PullRequest{}); len(status.Convert(err).Details()) != 0 {
		t.Fatalf("pull before init: %v carries details %v; want none (not a conflict)", err, status.Convert(err).Details())
	}
}

func TestNotInitialised(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	if _, err := s.Pull(context.Background(), &pb.PullRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("pull before init: %v", err)
	}
	if _, err := s.Push(context.Background(), &pb.PushRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("push before init: %v", err)
	}
}

func TestDoneClosesAllDone(t *testing.T) {
	s := newServer(t, false, 0, 2)
	for _, w := range []int32{1, 1, 0} {
		select {
		case <-s.AllDone():
			t.Fatalf("AllDone closed before worker %d", w)
		default:
		}
		if _, err := s.Done(context.Background(), &pb.DoneRequest{Worker: w}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-s.AllDone():
	case <-time.After(30 * time.Second):
		t.Fatal("AllDone did not close within 30s of every worker's Done")
	}
}

// One request never kills a ps: an Init whose shape overflows (it used to
// panic with "makeslice: len out of range") is refused as InvalidArgument,
// and the ps serves on.
func TestInitWithAnOverflowingShapeIsRefused(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	for _, shape := range [][]int64{{1<<62 + 1}, {1 << 32, 1 << 32}, {3037000500, 3037000500}} {
		_, err := s.Init(context.Background(), &pb.InitRequest{
			Vars:       []*pb.VarSpec{{Name: "w", Shape: shape, Init: f32(1)}},
			Optimizer:  &pb.OptimizerConfig{Name: "sgd", LearningRate: 0.5},
			NumWorkers: 1,
		})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "values") {
			t.Fatalf("shape %v: %v, want InvalidArgument naming the size", shape, err)
		}
	}
	newServerOn(t, s)
}

// newServerOn initialises s as newServer does, proving it still serves.
func newServerOn(t *testing.T, s *Server) {
	t.Helper()
	_, err := s.Init(context.Background(), &pb.InitRequest{
		Vars:       []*pb.VarSpec{{Name: "w", Shape: []int64{2}, Init: f32(1, 2)}},
		Optimizer:  &pb.OptimizerConfig{Name: "sgd", LearningRate: 0.5},
		NumWorkers: 1,
	})
	if err != nil {
		t.Fatalf("after a refused Init: %v", err)
	}
}

// Checkpoint and Restore requests may only name the ps's own
// --checkpoint_dir: a client cannot make the ps write or read files
// anywhere else.
func TestCheckpointRequestsAreConfinedToTheCheckpointDir(t *testing.T) {
	root := t.TempDir()
	elsewhere := t.TempDir()
	s := New(Config{NumWorkers: 1, CheckpointDir: root + "/ckpt"})
	newServerOn(t, s)
	for _, dir := range []string{elsewhere, root, root + "/ckpt/../../x", root + "/ckpt-evil", "/tmp"} {
		if _, err := s.Checkpoint(context.Background(), &pb.CheckpointRequest{Dir: dir, Step: 0, NumShards: 1}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "outside") {
			t.Errorf("Checkpoint to %s: %v, want InvalidArgument (outside the checkpoint dir)", dir, err)
		}
		if _, err := s.Restore(context.Background(), &pb.RestoreRequest{Dir: dir, Step: 0}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Restore from %s: %v, want InvalidArgument", dir, err)
		}
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("the ps wrote %d files outside its checkpoint dir", len(entries))
	}
	if _, err := s.Checkpoint(context.Background(), &pb.CheckpointRequest{Dir: root + "/ckpt", Step: 0, NumShards: 1}); err != nil {
		t.Fatalf("Checkpoint into its own dir: %v", err)
	}
	noDir := New(Config{NumWorkers: 1})
	newServerOn(t, noDir)
	if _, err := noDir.Checkpoint(context.Background(), &pb.CheckpointRequest{Dir: elsewhere, Step: 0, NumShards: 1}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--checkpoint_dir") {
		t.Fatalf("a ps without --checkpoint_dir: %v", err)
	}
}
