package replication

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/replica"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Sparse tables under replication (docs/REPLICATION.md). Pushes to tables
// go through the shard's log as dense ones do (sync: in the step's
// aggregate, as rows). A pull is not read-only: it counts keys for
// admission (--min_count) and creates rows, and those changes decide what
// later pushes do. So every copy reads rows without changing its tables
// (server.Config.Replicated sets shard.Config.PeekPulls), and a pull that
// would change them (some key has no row) is logged first, once its step
// is reached, as an entry of its keys that every copy applies in log order
// with the table's own Pull (Server.TouchRows); then the primary reads.
// Once every key of a pull has a row (the steady state) the pull changes
// nothing, and nothing is logged.

// Request ids of logged pulls: a pull that came with a push is
// (touchClient+worker, push step+1), so a resend after failover is
// recognised as the push is; a pull alone, and a Restore, are numbered by
// the clock.
const (
	touchClient   = 3 << 20
	pullClient    = 4 << 20
	restoreClient = 5 << 20
)

// ReplicatedPulled logs a pull's keys if reading them would change a
// table (server.Replicated), and returns once this copy applied them.
func (c *shardCopy) ReplicatedPulled(ctx context.Context, worker int32, pushStep int64, rows []server.PulledRows) error {
	changes, err := c.Server.PullChanges(rows)
	if err != nil || !changes {
		return err
	}
	id := timeID(pullClient + int(worker))
	if pushStep >= 0 {
		id = replica.ReqID{Client: touchClient + int(worker), N: uint64(pushStep) + 1}
	}
	b := server.EncodeTouch(rows)
	if c.Server.Sync() {
		// In sync mode the primary applies pushes and their aggregate
		// itself (pushHeld), not in log order: one logged pull at a time,
		// applied here before the next push is held, so that this copy
		// makes the pull's changes at the same place in the order of its
		// tables' updates as the backups do.
		c.holdMu.Lock()
		defer c.holdMu.Unlock()
	}
	_, err = c.logged(ctx, id, b)
	return err
}

// logged is propose for an entry already encoded, of no call's request.
func (c *shardCopy) logged(ctx context.Context, id replica.ReqID, b []byte) (*applied, error) {
	if err := c.waitServing(ctx); err != nil {
		return nil, err
	}
	a := &applied{}
	c.mu.Lock()
	c.pending[id] = a
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if err := c.host.Push(ctx, c.shard, id, b); err != nil {
		return nil, c.replicationError(err)
	}
	if done, err := c.waitApplied(ctx, a); err != nil || !done {
		return nil, err // !done: logged before, a resend
	}
	return a, a.err
}

// pulled logs the changes a gRPC pull makes to the tables, once its step is
// reached; pushStep is the step of the push that came with it, or -1.
func (c *shardCopy) pulled(ctx context.Context, req *pb.PullRequest, pushStep int64) error {
	if len(req.Sparse) == 0 {
		return nil
	}
	if err := c.Server.WaitStep(ctx, req.Worker, req.MinStep); err != nil {
		return err
	}
	rows := make([]server.PulledRows, len(req.Sparse))
	for i, r := range req.Sparse {
		keys, err := wire.Uint64s(r.Keys)
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "shard %d: table %q: %v", c.shard, r.Table, err)
		}
		rows[i] = server.PulledRows{Table: []byte(r.Table), Keys: keys}
	}
	return c.ReplicatedPulled(ctx, req.Worker, pushStep, rows)
}

// Restore goes through the shard's log: every copy restores the same
// checkpoint at the same place in the order of updates, and only the
// primary takes it (a copy that does not serve refuses it, as it refuses
// pulls). Without this a restore would reach one copy, and a failover
// would bring back the state it replaced.
func (c *shardCopy) Restore(ctx context.Context, req *pb.RestoreRequest) (*pb.RestoreResponse, error) {
	if c.Server.Sync() {
		c.holdMu.Lock() // as a logged pull: the primary's own updates stay in log order
		defer c.holdMu.Unlock()
	}
	resp, err := c.propose(ctx, timeID(restoreClient), req, nil)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, status.Errorf(codes.Aborted, "shard %d: the restore was logged before (a resend); check the ps's status", c.shard)
	}
	return resp.(*pb.RestoreResponse), nil
}
