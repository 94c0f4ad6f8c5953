package server

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/wire/pb"
)

// collect runs the calls of reqs at once and returns each one's answer.
func collect(s *Server, reqs []*pb.CollectiveRequest) ([][]float64, []error) {
	out := make([][]float64, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			resp, err := s.Collective(context.Background(), r)
			out[i], errs[i] = resp.GetValues(), err
		})
	}
	wg.Wait()
	return out, errs
}

func TestCollectiveReduces(t *testing.T) {
	s := New(Config{NumWorkers: 3})
	values := [][]float64{{1, -5}, {2, 7}, {4, 0.5}}
	want := map[string][]float64{"sum": {7, 2.5}, "mean": {7.0 / 3, 2.5 / 3}, "max": {4, 7}, "barrier": {}}
	for seq, op := range []string{"sum", "mean", "max", "barrier"} {
		var reqs []*pb.CollectiveRequest
		for w := range 3 {
			r := &pb.CollectiveRequest{Worker: int32(w), Seq: int64(seq), Op: op, World: 3, TimeoutMs: 600_000}
			if op != "barrier" {
				r.Values = values[w]
			}
			reqs = append(reqs, r)
		}
		got, errs := collect(s, reqs)
		for w := range 3 {
			if errs[w] != nil {
				t.Fatalf("%s: worker %d: %v", op, w, errs[w])
			}
			if len(got[w]) != len(want[op]) {
				t.Fatalf("%s: worker %d got %v, want %v", op, w, got[w], want[op])
			}
			for j := range got[w] {
				if got[w][j] != want[op][j] {
					t.Errorf("%s: worker %d got %v, want %v", op, w, got[w], want[op])
				}
			}
		}
	}
	if n := len(s.coll.open); n != 0 {
		t.Errorf("%d gatherings left open after every worker read its result", n)
	}
}

func TestCollectiveMismatch(t *testing.T) {
	s := New(Config{NumWorkers: 2})
	done := make(chan error, 1)
	go func() {
		_, err := s.Collective(context.Background(), &pb.CollectiveRequest{Worker: 0, Seq: 0, Op: "sum", Values: []float64{1, 2}, World: 2, TimeoutMs: 600_000})
		done <- err
	}()
	for opened := false; !opened; {
		s.coll.mu.Lock()
		opened = s.coll.open[0] != nil
		s.coll.mu.Unlock()
		runtime.Gosched()
	}
	// Worker 1 makes another call as its call #0: refused, naming both.
	_, err := s.Collective(context.Background(), &pb.CollectiveRequest{Worker: 1, Seq: 0, Op: "barrier", World: 2, TimeoutMs: 600_000})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v, want InvalidArgument", err)
	}
	if !strings.Contains(err.Error(), "worker 1 calls barrier among 2 workers where worker 0 called sum of 2 values") {
		t.Errorf("mismatch: %v", err)
	}
	// Then the matching call completes worker 0's.
	if _, err := s.Collective(context.Background(), &pb.CollectiveRequest{Worker: 1, Seq: 0, Op: "sum", Values: []float64{3, 4}, World: 2, TimeoutMs: 600_000}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A worker that never comes: the call gives up after its timeout and says
// whom it waited for; the gathering is forgotten.
func TestCollectiveGivesUpNamingTheMissing(t *testing.T) {
	s := New(Config{NumWorkers: 3})
	s.mu.Lock()
	s.heard(2)
	s.mu.Unlock()
	if _, err := s.Done(context.Background(), &pb.DoneRequest{Worker: 2}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Collective(context.Background(), &pb.CollectiveRequest{Worker: 0, Seq: 5, Op: "barrier", World: 3, TimeoutMs: 20})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	for _, want := range []string{"collective call #5 (barrier) of worker 0", "for worker(s) 1, 2 of 3", "worker 1 never heard from", "worker 2 has called Done"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nlacks %q", err, want)
		}
	}
	if n := len(s.coll.open); n != 0 {
		t.Errorf("%d gatherings left open after the only caller gave up", n)
	}
}

func TestCollectiveRefusesBadRequests(t *testing.T) {
	s := New(Config{NumWorkers: 2})
	for _, r := range []*pb.CollectiveRequest{
		{Worker: 0, Op: "min", World: 2, TimeoutMs: 1},
		{Worker: 0, Op: "barrier", Values: []float64{1}, World: 2, TimeoutMs: 1},
		{Worker: 0, Op: "sum", World: 3, TimeoutMs: 1},
		{Worker: 2, Op: "sum", World: 2, TimeoutMs: 1},
		{Worker: 0, Op: "sum", World: 2, TimeoutMs: 0},
		{Worker: 0, Op: "sum", World: 2, Seq: -1, TimeoutMs: 1},
		{Worker: 0, Op: "sum", World: 2, Values: make([]float64, MaxCollectiveValues+1), TimeoutMs: 1},
	} {
		if _, err := s.Collective(context.Background(), r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: got %v, want InvalidArgument", r, err)
		}
	}
}

// A retry by a worker whose gathering completed reads the same result.
func TestCollectiveRetryAfterCompletion(t *testing.T) {
	s := New(Config{NumWorkers: 2})
	reqs := []*pb.CollectiveRequest{
		{Worker: 0, Seq: 0, Op: "sum", Values: []float64{1}, World: 2, TimeoutMs: 600_000},
		{Worker: 1, Seq: 0, Op: "sum", Values: []float64{2}, World: 2, TimeoutMs: 600_000},
	}
	g, err := s.coll.join(reqs[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.coll.join(reqs[1]); err != nil {
		t.Fatal(err)
	}
	if got := s.coll.result(0, g, 0); got[0] != 3 {
		t.Fatalf("sum %v", got)
	}
	resp, err := s.Collective(context.Background(), reqs[0])
	if err != nil || resp.Values[0] != 3 {
		t.Fatalf("retry: %v %v", resp, err)
	}
}

// An all-reduce of MaxCollectiveValues values reaches a ps whose layout
// allows far smaller requests (4 values: a 64 KiB bound), over gRPC; a
// larger request is refused by gRPC's limit, before it is read.
func TestCollectiveOverGRPCPassesTheLayoutBound(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	addr := serveTCP(t, s)
	initVar(t, s, 4)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ps := pb.NewParamServerClient(conn)
	values := make([]float64, MaxCollectiveValues)
	values[7] = 3
	resp, err := ps.Collective(context.Background(), &pb.CollectiveRequest{Op: "sum", Values: values, World: 1, TimeoutMs: 60_000})
	if err != nil || len(resp.GetValues()) != MaxCollectiveValues || resp.GetValues()[7] != 3 {
		t.Fatalf("an all-reduce of %d values: %d values back, %v", MaxCollectiveValues, len(resp.GetValues()), err)
	}
	_, err = ps.Collective(context.Background(), &pb.CollectiveRequest{Seq: 1, Op: "sum", Values: make([]float64, 2*MaxCollectiveValues), World: 1, TimeoutMs: 60_000})
	if err == nil || !strings.Contains(err.Error(), "received message larger than max") {
		t.Fatalf("an all-reduce of %d values: %v, want it refused by gRPC's limit", 2*MaxCollectiveValues, err)
	}
}
