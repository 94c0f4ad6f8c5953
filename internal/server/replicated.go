package server

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Replicated is the replicated shard a server is one copy of
// (docs/REPLICATION.md; package replication's copy of a shard implements
// it, and drives the server through FSM). The data path does not apply a
// push itself: it hands the push to
// ReplicatedPush, which logs it, has every copy apply it in log order
// (this one through Server.Push) and answers once every live copy holds
// it; a retry of a push the log holds is recognised there by its request
// id (worker, step+1), as for gRPC. Before a pull, ReplicatedServing waits
// until this copy may answer it (it is the primary, and every live copy
// holds what it applied), or says why not.
//
// Rows are read without changing the tables (shard.Config.PeekPulls): a
// pull that would change them (count a key for admission, give it a row)
// is handed to ReplicatedPulled once its step is reached, which logs the
// keys so that every copy makes those changes in log order (TouchRows);
// only then are the rows read. pushStep is the step of the push that came
// with the pull (its request id), or -1 for a pull alone.
type Replicated interface {
	ReplicatedPush(ctx context.Context, req *pb.PushRequest) (*pb.PushResponse, error)
	ReplicatedServing(ctx context.Context) error
	ReplicatedPulled(ctx context.Context, worker int32, pushStep int64, rows []PulledRows) error
}

// PulledRows are the keys a pull reads from one table.
type PulledRows struct {
	Table []byte
	Keys  []uint64
}

// PullChanges reports whether reading rows without PeekPulls would change
// a table (shard.Shard.PullChanges).
func (s *Server) PullChanges(rows []PulledRows) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		ch, err := s.shard.PullChanges(r.Table, r.Keys)
		if err != nil || ch {
			return ch, statusOf(err)
		}
	}
	return false, nil
}

// TouchRows makes the changes a pull of rows makes to the tables
// (shard.Shard.TouchRows): a logged pull, applied by every copy.
func (s *Server) TouchRows(rows []PulledRows) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		if err := s.shard.TouchRows(r.Table, r.Keys); err != nil {
			return statusOf(err)
		}
	}
	return nil
}

// WaitStep waits until the shard's step reaches min, as a pull does
// before reading.
func (s *Server) WaitStep(ctx context.Context, worker int32, min int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.shard.Initialized() {
		return statusOf(s.notInitialized())
	}
	if s.shard.Ready(min) {
		return nil
	}
	return statusOf(s.waitStep(ctx, int(worker), min))
}

// handleReplicatedData is handleData for a copy of a replicated shard:
// the push goes through the shard's log (without mu: the log's apply takes
// it), the pull is answered here once this copy serves; a pull that
// changes the tables is logged first (ReplicatedPulled).
func (s *Server) handleReplicatedData(ctx context.Context, dc *dataConn) {
	start := time.Now()
	r := &dc.req
	if r.Incremental || r.DenseIncremental {
		dc.errorReply(&shard.Error{Kind: shard.Invalid, Msg: fmt.Sprintf("ps %d: incremental pulls are not served by a replicated shard (a copy that takes over holds other row versions); pull without --incremental_pull", s.cfg.Task)})
		return
	}
	// The key sets of the sparse sections (the data path's key cache is
	// the connection's own, as without replicas).
	if err := dc.locate(); err != nil {
		dc.errorReply(s.locateError(err))
		return
	}
	var pushed *pb.PushResponse
	if r.Op.Push() {
		// The gradients stay in the connection's buffers: the call
		// returns only once this copy applied them (or gave up on them
		// without logging them).
		req := &pb.PushRequest{Worker: r.Worker, Step: r.Step, Incarnation: uint64(r.Incarnation), Grads: make([]*pb.DenseTensor, len(r.Dense))}
		for i, d := range r.Dense {
			req.Grads[i] = &pb.DenseTensor{Name: string(d.Name), Data: wire.Float32Bytes(d.Data)}
		}
		for i := range r.SparsePush {
			sec := &r.SparsePush[i]
			req.Sparse = append(req.Sparse, &pb.SparseRows{Table: string(sec.Table), Keys: wire.Uint64Bytes(dc.pushSets[i].set.Keys()), Values: wire.Float32Bytes(sec.Values)})
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
	if len(r.SparsePull) > 0 {
		// The pull's changes to the tables go through the log, once its
		// step is reached (as a pull without replicas makes them then).
		pushStep := int64(-1)
		if r.Op.Push() {
			pushStep = r.Step
		}
		wctx, stop := dc.watchClose(ctx)
		err := s.WaitStep(wctx, r.Worker, r.MinStep)
		stop()
		if err == nil {
			rows := make([]PulledRows, len(r.SparsePull))
			for i := range r.SparsePull {
				rows[i] = PulledRows{Table: r.SparsePull[i].Table, Keys: dc.pullSets[i].set.Keys()}
			}
			err = s.cfg.Replicated.ReplicatedPulled(ctx, r.Worker, pushStep, rows)
		}
		if err != nil {
			dc.errorReply(err)
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heard(r.Worker)
	// Heard again when the reply is made: a request that took long (a
	// pull of many rows from a disk tier, the chief's final evaluation)
	// must not leave its worker looking silent for as long, which after
	// the goal reads as gone (jobEnd's goneAfter).
	defer s.heard(r.Worker)
	if !s.shard.Initialized() {
		dc.errorReply(s.notInitialized())
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
func (s *Server) ApplyAggregate(step int64, grads [][]float32, rows []shard.RowGrads) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.shard.ApplyAggregate(step, grads, rows)
	s.notify()
	return err
}
