package server

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Replicated is the replicated shard a server is one copy of
// (docs/REPLICATION.md; the trainer's replicatedCopy implements it). The
// data path does not apply a push itself: it hands the push to
// ReplicatedPush, which logs it, has every copy apply it in log order
// (this one through Server.Push) and answers once every live copy holds
// it; a retry of a push the log holds is recognised there by its request
// id (worker, step+1), as for gRPC. Before a pull, ReplicatedServing waits
// until this copy may answer it (it is the primary, and every live copy
// holds what it applied), or says why not.
type Replicated interface {
	ReplicatedPush(ctx context.Context, req *pb.PushRequest) (*pb.PushResponse, error)
	ReplicatedServing(ctx context.Context) error
}

// handleReplicatedData is handleData for a copy of a replicated shard:
// the push goes through the shard's log (without mu: the log's apply takes
// it), the pull is answered here once this copy serves. Dense variables
// only, as replicated shards hold.
func (s *Server) handleReplicatedData(ctx context.Context, dc *dataConn) {
	start := time.Now()
	r := &dc.req
	if len(r.SparsePush) > 0 || len(r.SparsePull) > 0 {
		dc.errorReply(status.Errorf(codes.InvalidArgument, "ps %d: a replicated shard holds dense variables only; the request has %d sparse sections", s.cfg.Task, len(r.SparsePush)+len(r.SparsePull)))
		return
	}
	var pushed *pb.PushResponse
	if r.Op.Push() {
		// The gradients stay in the connection's buffers: the call
		// returns only once this copy applied them (or gave up on them
		// without logging them).
		req := &pb.PushRequest{Worker: r.Worker, Step: r.Step, Grads: make([]*pb.DenseTensor, len(r.Dense))}
		for i, d := range r.Dense {
			req.Grads[i] = &pb.DenseTensor{Name: string(d.Name), Data: wire.Float32Bytes(d.Data)}
		}
		var err error
		if pushed, err = s.cfg.Replicated.ReplicatedPush(ctx, req); err != nil {
			dc.errorReply(err)
			return
		}
		if !r.Op.Pull() {
			dc.reply.Reset(wire.RepHeaderLen)
			dc.reply.Reply(wire.RepHeader{Dropped: pushed.Dropped, Step: pushed.GlobalStep, Incarnation: pushed.Incarnation})
			return
		}
	}
	if err := s.cfg.Replicated.ReplicatedServing(ctx); err != nil {
		dc.errorReply(err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heard(r.Worker)
	if !s.shard.Initialized() {
		dc.errorReply(status.Errorf(codes.FailedPrecondition, "ps %d: %v", s.cfg.Task, shard.ErrNotInitialized))
		return
	}
	if !s.shard.Ready(r.MinStep) {
		wctx, stop := dc.watchClose(ctx)
		err := s.waitStep(wctx, int(r.Worker), r.MinStep)
		stop()
		if err != nil {
			dc.errorReply(err)
			return
		}
	}
	if err := s.dataPull(dc, pushed.GetDropped(), start); err != nil {
		dc.errorReply(err)
	}
}

// Mux shares lis between gRPC and this server's data path, as
// ServeListener does, for a caller that runs its own gRPC server (a copy of
// a replicated shard registers its own service): serve gRPC on the
// listener returned, and call stop to end the data connections.
func (s *Server) Mux(lis net.Listener) (grpcLis net.Listener, stop func()) {
	m := newMux(lis, s)
	go m.run()
	return m.grpcListener(), m.close
}

// Sync reports whether the shard trains synchronously (false before Init).
func (s *Server) Sync() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shard.Sync()
}

// ApplyAggregate applies a synchronous step's averaged gradients, as the
// primary copy's Config.Aggregated reported them (a backup copy's side of
// replication after aggregation, shard.ApplyAggregate).
func (s *Server) ApplyAggregate(step int64, grads [][]float32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.shard.ApplyAggregate(step, grads)
	s.notify()
	return err
}
