package server

import (
	"context"
	"math"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// fuseN is a variable size that is fused, over several read chunks and
// not a multiple of one.
const fuseN = 3*fuseMin + 123

func initFusable(t *testing.T, s *Server, rule string, workers int) {
	t.Helper()
	init := make([]float32, fuseN)
	for i := range init {
		init[i] = float32(i%97) / 7
	}
	if _, err := s.Init(context.Background(), &pb.InitRequest{
		Vars: []*pb.VarSpec{
			{Name: "a", Shape: []int64{fuseN}, Init: wire.Float32Bytes(init)},
			{Name: "b", Shape: []int64{fuseN}, Init: wire.Float32Bytes(init)},
		},
		Optimizer:  &pb.OptimizerConfig{Name: rule, LearningRate: 0.1, Momentum: 0.9},
		NumWorkers: int32(workers),
	}); err != nil {
		t.Fatal(err)
	}
}

func randGrad(rng *rand.Rand) []float32 {
	g := make([]float32, fuseN)
	for i := range g {
		g[i] = float32(rng.NormFloat64())
	}
	return g
}

// values returns a copy of variable name's values.
func (s *Server) values(name string) []float32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]float32(nil), s.vars[name].value...)
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %v, want %v (bit for bit)", what, i, got[i], want[i])
		}
	}
}

// Pushes applied as they arrive give, bit for bit, what the same pushes
// give by gRPC (never fused), and what a push+pull answers; a push whose
// last chunk holds a NaN changes nothing. With a stateful rule nothing is
// fused, and the results agree too.
func TestFusedPushMatchesUnfused(t *testing.T) {
	for _, rule := range []string{"sgd", "momentum"} {
		t.Run(rule, func(t *testing.T) {
			fast, ref := New(Config{NumWorkers: 1}), New(Config{NumWorkers: 1})
			initFusable(t, fast, rule, 1)
			initFusable(t, ref, rule, 1)
			rc := dialRaw(t, serveTCP(t, fast))
			rng := rand.New(rand.NewPCG(1, 2))
			const pushes = 6
			for k := range pushes {
				ga, gb := randGrad(rng), randGrad(rng)
				op := wire.OpPush
				if k%2 == 1 {
					op = wire.OpPushPull
				}
				r := rc.do(wire.ReqHeader{Op: op, PullDense: op.Pull()}, func(f *wire.Frame) { f.Dense("a", ga); f.Dense("b", gb) })
				if r.Err {
					t.Fatalf("push %d: %s", k, r.msg)
				}
				if _, err := ref.Push(context.Background(), &pb.PushRequest{Grads: []*pb.DenseTensor{
					{Name: "a", Data: wire.Float32Bytes(ga)}, {Name: "b", Data: wire.Float32Bytes(gb)},
				}}); err != nil {
					t.Fatal(err)
				}
				if op.Pull() {
					sameBits(t, "pulled a", r.dense["a"], ref.values("a"))
					sameBits(t, "pulled b", r.dense["b"], ref.values("b"))
				}
			}
			before := fast.values("b")
			bad := randGrad(rng)
			bad[fuseN-1] = float32(math.NaN())
			r := rc.do(wire.ReqHeader{Op: wire.OpPushPull, PullDense: true}, func(f *wire.Frame) { f.Dense("a", randGrad(rng)); f.Dense("b", bad) })
			if !r.Err || r.code != codes.InvalidArgument {
				t.Fatalf("a push with a NaN: %+v, want InvalidArgument", r)
			}
			sameBits(t, "a", fast.values("a"), ref.values("a"))
			sameBits(t, "b", fast.values("b"), before)
			want := int64(pushes)
			if rule != "sgd" {
				want = 0
			}
			fast.mu.Lock()
			fused := fast.fused
			fast.mu.Unlock()
			if fused != want {
				t.Errorf("%d pushes applied as they arrived, want %d", fused, want)
			}
		})
	}
}

// A push that arrives while another is being applied as it arrives is
// applied first; the fused one then finds its variable changed, throws its
// values away and applies its gradient to the new ones, so both count.
// The variable is then not fused for fuseBackoff pushes.
func TestFusedPushOverlapped(t *testing.T) {
	s := New(Config{NumWorkers: 2})
	initFusable(t, s, "sgd", 2)
	addr := serveTCP(t, s)
	slow, quick := dialRaw(t, addr), dialRaw(t, addr)
	rng := rand.New(rand.NewPCG(3, 4))
	g1, g2 := randGrad(rng), randGrad(rng)

	// The slow worker sends its push but the last kilobyte.
	slow.f.Reset(wire.ReqHeaderLen)
	slow.f.Dense("a", g1)
	var frame []byte
	for _, b := range slow.f.Request(wire.ReqHeader{Op: wire.OpPush, Worker: 0}) {
		frame = append(frame, b...)
	}
	cut := len(frame) - 1024
	slow.send(net.Buffers{frame[:cut]})
	for deadline := time.Now().Add(10 * time.Second); ; {
		s.mu.Lock()
		fusing := s.vars["a"].fusing
		s.mu.Unlock()
		if fusing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow push is not being fused after 10s")
		}
		time.Sleep(time.Millisecond)
	}
	if r := quick.do(wire.ReqHeader{Op: wire.OpPush, Worker: 1}, func(f *wire.Frame) { f.Dense("a", g2) }); r.Err {
		t.Fatal(r.msg)
	}
	slow.send(net.Buffers{frame[cut:]})
	if r := slow.read(); r.Err {
		t.Fatal(r.msg)
	}

	ref := New(Config{NumWorkers: 2})
	initFusable(t, ref, "sgd", 2)
	for _, g := range [][]float32{g2, g1} {
		if _, err := ref.Push(context.Background(), &pb.PushRequest{Grads: []*pb.DenseTensor{{Name: "a", Data: wire.Float32Bytes(g)}}}); err != nil {
			t.Fatal(err)
		}
	}
	sameBits(t, "a", s.values("a"), ref.values("a"))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fused != 0 || s.vars["a"].fuseSkip != fuseBackoff || s.vars["a"].fusing {
		t.Errorf("fused %d, skip %d, fusing %v; want 0, %d, false", s.fused, s.vars["a"].fuseSkip, s.vars["a"].fusing, fuseBackoff)
	}
	if st := s.tracker.Step(); st != 2 {
		t.Errorf("global step %d, want 2", st)
	}
}
