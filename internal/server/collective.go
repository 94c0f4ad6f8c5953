package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Collectives: the barrier and the all-reduce of a few numbers that a
// program's workers make among themselves (Python's barrier() and
// all_reduce()). The workers send them to ps 0. Each worker numbers its
// collective calls 0, 1, 2, ...; the call numbered k of every worker
// forms one gathering, which completes when the world's workers have all
// joined it: each then reads the same reduction (summed in worker order,
// so every worker gets the same bits). A call waits at most its own
// timeout, and a call that gives up names the workers it waited for and
// what the ps knows of them (done, or when last heard from): a worker
// that died does not hang the others for ever. Gatherings are not kept in
// checkpoints; after a ps restart the workers call again.

// Collective limits: the numbers one call may carry, the gatherings open
// at once, and the longest wait a call may ask for.
const (
	MaxCollectiveValues = 1 << 16
	// maxCollectiveBytes bounds a collective request on the wire, apart
	// from the layout's bound (GRPCLimit), which a small model makes
	// smaller than an all-reduce of MaxCollectiveValues: 8 bytes a value
	// and the other fields.
	maxCollectiveBytes = 8*MaxCollectiveValues + 1024
	maxGatherings      = 4096
	maxCollectiveWait  = 24 * time.Hour
)

// collectiveOps are the operations a gathering may reduce by.
var collectiveOps = []string{"barrier", "sum", "mean", "max"}

// gatherings holds the gatherings under way. Its methods may run
// concurrently; mu guards open and every gathering's fields.
type gatherings struct {
	mu   sync.Mutex
	open map[int64]*gathering
}

// gathering is the collective call of one sequence number.
type gathering struct {
	op    string
	n     int   // values per worker
	first int32 // the worker that opened it, for the message of a mismatch
	world int
	got   map[int32][]float64 // by worker
	read  map[int32]bool      // the workers that have read the result
	done  chan struct{}       // closed once complete
	out   []float64
}

// reduce combines the workers' values (in worker order) by op.
func reduce(op string, n int, got map[int32][]float64) []float64 {
	workers := make([]int32, 0, len(got))
	for w := range got {
		workers = append(workers, w)
	}
	slices.Sort(workers)
	out := make([]float64, n)
	for i, w := range workers {
		for j, v := range got[w] {
			switch {
			case op == "max" && i > 0:
				out[j] = math.Max(out[j], v)
			case op == "max":
				out[j] = v
			default:
				out[j] += v
			}
		}
	}
	if op == "mean" {
		for j := range out {
			out[j] /= float64(len(got))
		}
	}
	return out
}

// describe is a call's operation for messages: "barrier", "sum of 3 values".
func describe(op string, n int) string {
	if op == "barrier" {
		return op
	}
	return fmt.Sprintf("%s of %d values", op, n)
}

// join adds worker w's values to gathering seq, opening it if needed, and
// returns it; it completes the gathering when w is the last of its world.
// A call again by a worker already in it (a retry) replaces its values,
// or, once complete, reads the result.
func (gs *gatherings) join(req *pb.CollectiveRequest) (*gathering, error) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.open == nil {
		gs.open = map[int64]*gathering{}
	}
	g := gs.open[req.Seq]
	if g == nil {
		if len(gs.open) >= maxGatherings {
			return nil, fmt.Errorf("%w: collective call #%d: %d collective calls are open already (workers out of step?)", errCollectiveFull, req.Seq, len(gs.open))
		}
		g = &gathering{op: req.Op, n: len(req.Values), first: req.Worker, world: int(req.World),
			got: map[int32][]float64{}, read: map[int32]bool{}, done: make(chan struct{})}
		gs.open[req.Seq] = g
	}
	if g.op != req.Op || g.n != len(req.Values) || g.world != int(req.World) {
		return nil, fmt.Errorf("%w: "+
			"collective call #%d: worker %d calls %s among %d workers where worker %d called %s among %d: every worker must make the same collective calls in the same order",
			errCollectiveInvalid, req.Seq, req.Worker, describe(req.Op, len(req.Values)), req.World, g.first, describe(g.op, g.n), g.world)
	}
	select {
	case <-g.done:
		return g, nil
	default:
	}
	g.got[req.Worker] = slices.Clone(req.Values)
	if len(g.got) == g.world {
		g.out = reduce(g.op, g.n, g.got)
		close(g.done)
	}
	return g, nil
}

// result reads gathering seq's result for worker w and forgets the
// gathering once every worker has read it.
func (gs *gatherings) result(seq int64, g *gathering, w int32) []float64 {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g.read[w] = true
	if len(g.read) == g.world && gs.open[seq] == g {
		delete(gs.open, seq)
	}
	return g.out
}

// leave takes worker w's values out of gathering seq, not complete, when
// its call gave up (the gathering is forgotten once empty); it returns
// the workers still missing.
func (gs *gatherings) leave(seq int64, g *gathering, w int32) (missing []int) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for i := 0; i < g.world; i++ {
		if _, ok := g.got[int32(i)]; !ok {
			missing = append(missing, i)
		}
	}
	select {
	case <-g.done:
		return nil
	default:
	}
	delete(g.got, w)
	if len(g.got) == 0 && gs.open[seq] == g {
		delete(gs.open, seq)
	}
	return missing
}

// checkCollective says what is wrong with a collective request, or nil.
func checkCollective(req *pb.CollectiveRequest, numWorkers int) error {
	switch {
	case !slices.Contains(collectiveOps, req.Op):
		return fmt.Errorf("collective call: op %q: want one of %s", req.Op, strings.Join(collectiveOps, ", "))
	case req.Op == "barrier" && len(req.Values) > 0:
		return fmt.Errorf("collective call: a barrier carries no values, got %d", len(req.Values))
	case len(req.Values) > MaxCollectiveValues:
		return fmt.Errorf("collective call: %d values: at most %d (all_reduce is for metrics, not for tensors)", len(req.Values), MaxCollectiveValues)
	case req.World < 1 || (numWorkers > 0 && int(req.World) != numWorkers):
		return fmt.Errorf("collective call: world of %d workers: the cluster has %d", req.World, numWorkers)
	case req.Worker < 0 || req.Worker >= req.World:
		return fmt.Errorf("collective call: worker %d: want 0..%d", req.Worker, req.World-1)
	case req.Seq < 0:
		return fmt.Errorf("collective call: sequence number %d: want >= 0", req.Seq)
	case req.TimeoutMs <= 0 || time.Duration(req.TimeoutMs)*time.Millisecond > maxCollectiveWait:
		return fmt.Errorf("collective call: timeout of %d ms: want 1 ms to %s", req.TimeoutMs, maxCollectiveWait)
	}
	return nil
}

// The errors of a collective call, which grpc.go gives their gRPC codes
// (ResourceExhausted, InvalidArgument, DeadlineExceeded).
var (
	errCollectiveFull    = errors.New("too many collective calls open")
	errCollectiveInvalid = errors.New("invalid collective call")
	errCollectiveTimeout = errors.New("collective call timed out")
)

// collective joins the worker's call to the gathering of its sequence
// number and answers once every worker has joined, with the reduction of
// their values, or gives up after the request's timeout (DeadlineExceeded,
// naming the workers still missing).
func (s *Server) collective(ctx context.Context, req *pb.CollectiveRequest) (*pb.CollectiveResponse, error) {
	if err := checkCollective(req, s.cfg.NumWorkers); err != nil {
		return nil, fmt.Errorf("%w: %w", errCollectiveInvalid, err)
	}
	s.mu.Lock()
	s.heard(req.Worker)
	s.mu.Unlock()
	g, err := s.coll.join(req)
	if err != nil {
		return nil, err
	}
	wait := time.Duration(req.TimeoutMs) * time.Millisecond
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-g.done:
		return &pb.CollectiveResponse{Values: s.coll.result(req.Seq, g, req.Worker)}, nil
	case <-timer.C:
	case <-ctx.Done():
	}
	missing := s.coll.leave(req.Seq, g, req.Worker)
	if missing == nil { // completed as it gave up
		return &pb.CollectiveResponse{Values: s.coll.result(req.Seq, g, req.Worker)}, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	msg := fmt.Sprintf("collective call #%d (%s) of worker %d: waited %s for worker(s) %s of %d: %s",
		req.Seq, describe(req.Op, len(req.Values)), req.Worker, wait, joinInts(missing), req.World, s.whereabouts(missing))
	s.cfg.Logf("ps %d: %s", s.cfg.Task, msg)
	return nil, fmt.Errorf("%w: %s", errCollectiveTimeout, msg)
}

// whereabouts says what the ps knows of the workers: done, never heard
// from, or when last heard from.
func (s *Server) whereabouts(workers []int) string {
	done, seen := s.WorkerActivity()
	now := time.Now()
	var parts []string
	for _, w := range workers {
		switch t, ok := seen[w]; {
		case slices.Contains(done, w):
			parts = append(parts, fmt.Sprintf("worker %d has called Done", w))
		case !ok:
			parts = append(parts, fmt.Sprintf("worker %d never heard from", w))
		default:
			parts = append(parts, fmt.Sprintf("worker %d last heard from %s ago", w, now.Sub(t).Round(time.Second)))
		}
	}
	return strings.Join(parts, ", ") + " (a worker that died, or one that makes other collective calls)"
}

func joinInts(xs []int) string {
	sort.Ints(xs)
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
