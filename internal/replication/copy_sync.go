package replication

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/replica"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Replication after aggregation (docs/REPLICATION.md): in synchronous mode
// the primary applies each worker's push to its own copy and holds it
// (Host.Hold); when the step completes, the shard hands out the step's
// averaged gradients (server.Config.Aggregated) and the primary logs them
// as one entry covering the step's pushes (Host.Aggregate). A backup
// applies that entry with Server.ApplyAggregate (through server.FSM): one
// update per step and 1/W of the gradient bytes, bit-identical to applying
// every push. A push is acknowledged once the aggregate holding it is held
// by every live copy; a primary that dies mid-step loses only
// unacknowledged pushes, which the workers send again to the new primary.

// pushHeld is Push in synchronous mode: the push is applied here and held
// until its step's aggregate is logged.
func (c *shardCopy) pushHeld(ctx context.Context, req *pb.PushRequest) (*pb.PushResponse, error) {
	if err := c.waitServing(ctx); err != nil {
		return nil, err
	}
	id := replica.ReqID{Client: int(req.Worker), N: uint64(req.Step) + 1}
	// One push at a time from the hold to its application: a step's
	// aggregate (logged from inside Server.Push) covers exactly the pushes
	// held before it.
	c.holdMu.Lock()
	// Entries logged before (Init, Done) are applied first, as the backups
	// apply them.
	if err := c.applier.wait(ctx, c.applier.mark()); err != nil {
		c.holdMu.Unlock()
		return nil, status.FromContextError(err).Err()
	}
	dup, wait, err := c.host.Hold(c.shard, id)
	if err != nil {
		c.holdMu.Unlock()
		return nil, c.replicationError(err)
	}
	var resp *pb.PushResponse
	if !dup {
		resp, err = c.Server.Push(ctx, req)
	}
	c.holdMu.Unlock()
	if err != nil {
		return nil, err
	}
	// A ps that gives up on the job completes no more steps: the push
	// reads why.
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.life, cancel)
	err = wait(wctx)
	stop()
	cancel()
	if err != nil {
		if ferr := c.Server.Failed(); ferr != nil {
			return nil, ferr
		}
		return nil, c.replicationError(err)
	}
	if resp == nil { // a retry of a push held or logged before
		st, err := c.Server.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return nil, err
		}
		return &pb.PushResponse{GlobalStep: st.GlobalStep, Incarnation: st.Incarnation}, nil
	}
	return resp, nil
}

// replicationError is the status a worker gets for a replication error.
func (c *shardCopy) replicationError(err error) error {
	var np *replica.NotPrimaryError
	switch {
	case errors.As(err, &np) || errors.Is(err, replica.ErrNotPrimary):
		return status.Errorf(codes.Unavailable, "shard %d: %v", c.shard, err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Unavailable, "shard %d: replicating: %v", c.shard, err)
}

// aggregated logs a completed step's aggregate (server.Config.Aggregated,
// called with the server's lock held, on the primary). On a copy that is
// not the primary it does nothing: backups complete no step themselves.
func (c *shardCopy) aggregated(step int64, grads [][]float32, rows []shard.RowGrads) {
	if c.host == nil {
		return
	}
	if err := c.host.Aggregate(c.shard, server.EncodeAggregate(step, grads, rows)); err != nil {
		c.logf("step %d's aggregate not logged: %v (its pushes are not acknowledged; the workers send them again to the next primary)", step, err)
	}
}
