package trainer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/replica"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Replication after aggregation (docs/REPLICATION.md): in synchronous mode
// the primary applies each worker's push to its own copy and holds it
// (replication.Host.Hold); when the step completes, the shard hands out the
// step's averaged gradients (server.Config.Aggregated) and the primary logs
// them as one entry covering the step's pushes (Host.Aggregate). A backup
// applies that entry with Server.ApplyAggregate: one update per step and
// 1/W of the gradient bytes, bit-identical to applying every push. A push
// is acknowledged once the aggregate holding it is held by every live copy;
// a primary that dies mid-step loses only unacknowledged pushes, which the
// workers send again to the new primary.

// entryAggregate is a log entry of a step's aggregate: step i64, the
// number of variables u32, then each variable's values (u32 count, float32
// values), in the shard's layout order; then, for a shard with sparse
// tables, their rows (encodeRows).
const entryAggregate byte = 4

// pushHeld is Push in synchronous mode: the push is applied here and held
// until its step's aggregate is logged.
func (c *replicatedCopy) pushHeld(ctx context.Context, req *pb.PushRequest) (*pb.PushResponse, error) {
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
	if err := wait(ctx); err != nil {
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
func (c *replicatedCopy) replicationError(err error) error {
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
func (c *replicatedCopy) aggregated(step int64, grads [][]float32, rows []shard.RowGrads) {
	if c.host == nil {
		return
	}
	n := 1 + 8 + 4
	for _, g := range grads {
		n += 4 + 4*len(g)
	}
	if len(rows) > 0 {
		n += rowsSize(rows)
	}
	b := make([]byte, 0, n)
	b = append(b, entryAggregate)
	b = binary.LittleEndian.AppendUint64(b, uint64(step))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(grads)))
	for _, g := range grads {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(g)))
		b = append(b, wire.Float32Bytes(g)...)
	}
	if len(rows) > 0 {
		b = encodeRows(b, rows)
	}
	if err := c.host.Aggregate(c.shard, b); err != nil {
		c.logf("step %d's aggregate not logged: %v (its pushes are not acknowledged; the workers send them again to the next primary)", step, err)
	}
}

// applyAggregate applies an aggregate entry's bytes to this copy.
func (c *replicatedCopy) applyAggregate(data []byte) error {
	bad := func(what string) error {
		return fmt.Errorf("shard %d: malformed aggregate entry: %s", c.shard, what)
	}
	if len(data) < 12 {
		return bad("short header")
	}
	step := int64(binary.LittleEndian.Uint64(data))
	nv := int(binary.LittleEndian.Uint32(data[8:]))
	data = data[12:]
	if nv > len(data)/4 {
		return bad("too many variables")
	}
	grads := make([][]float32, nv)
	for i := range grads {
		if len(data) < 4 {
			return bad("short variable header")
		}
		k := int(binary.LittleEndian.Uint32(data))
		data = data[4:]
		if k > len(data)/4 {
			return bad("short values")
		}
		g := make([]float32, k) // aligned, whatever the entry's offset
		copy(wire.Float32Bytes(g), data[:4*k])
		grads[i] = g
		data = data[4*k:]
	}
	var rows []shard.RowGrads
	if len(data) != 0 { // the tables' rows (replicated_sparse.go)
		var err error
		if rows, err = decodeRows(data); err != nil {
			return fmt.Errorf("shard %d: %w", c.shard, err)
		}
	}
	return c.Server.ApplyAggregate(step, grads, rows)
}
