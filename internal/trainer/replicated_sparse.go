package trainer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/replica"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/shard"
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

// entryTouch is a log entry of a pull's keys: per table, u32 name length,
// the name, u32 key count, the keys (u64 each). entryRestore is a Restore
// request, applied by every copy.
const (
	entryTouch   byte = 5
	entryRestore byte = 6
)

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
func (c *replicatedCopy) ReplicatedPulled(ctx context.Context, worker int32, pushStep int64, rows []server.PulledRows) error {
	changes, err := c.Server.PullChanges(rows)
	if err != nil || !changes {
		return err
	}
	id := timeID(pullClient + int(worker))
	if pushStep >= 0 {
		id = replica.ReqID{Client: touchClient + int(worker), N: uint64(pushStep) + 1}
	}
	n := 1
	for _, r := range rows {
		n += 8 + len(r.Table) + 8*len(r.Keys)
	}
	b := make([]byte, 1, n)
	b[0] = entryTouch
	for _, r := range rows {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Table)))
		b = append(b, r.Table...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Keys)))
		b = append(b, wire.Uint64Bytes(r.Keys)...)
	}
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
func (c *replicatedCopy) logged(ctx context.Context, id replica.ReqID, b []byte) (*applied, error) {
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

// applyTouch applies a logged pull to this copy.
func (c *replicatedCopy) applyTouch(data []byte) error {
	var rows []server.PulledRows
	for len(data) > 0 {
		if len(data) < 4 {
			return fmt.Errorf("shard %d: malformed pull entry: short table header", c.shard)
		}
		nl := int(binary.LittleEndian.Uint32(data))
		data = data[4:]
		if nl > len(data) || len(data)-nl < 4 {
			return fmt.Errorf("shard %d: malformed pull entry: short table name", c.shard)
		}
		name := data[:nl]
		nk := int(binary.LittleEndian.Uint32(data[nl:]))
		data = data[nl+4:]
		if nk > len(data)/8 {
			return fmt.Errorf("shard %d: malformed pull entry: %d keys in %d bytes", c.shard, nk, len(data))
		}
		keys := make([]uint64, nk) // aligned, whatever the entry's offset
		copy(wire.Uint64Bytes(keys), data[:8*nk])
		data = data[8*nk:]
		rows = append(rows, server.PulledRows{Table: name, Keys: keys})
	}
	return c.Server.TouchRows(rows)
}

// pulled logs the changes a gRPC pull makes to the tables, once its step is
// reached; pushStep is the step of the push that came with it, or -1.
func (c *replicatedCopy) pulled(ctx context.Context, req *pb.PullRequest, pushStep int64) error {
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
func (c *replicatedCopy) Restore(ctx context.Context, req *pb.RestoreRequest) (*pb.RestoreResponse, error) {
	if c.Server.Sync() {
		c.holdMu.Lock() // as a logged pull: the primary's own updates stay in log order
		defer c.holdMu.Unlock()
	}
	resp, err := c.propose(ctx, entryRestore, timeID(restoreClient), req)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, status.Errorf(codes.Aborted, "shard %d: the restore was logged before (a resend); check the ps's status", c.shard)
	}
	return resp.(*pb.RestoreResponse), nil
}

// applyRestore applies a logged Restore to this copy. A copy that cannot
// restore (its checkpoint directory lacks the checkpoint) no longer holds
// what the others hold: it says so loudly.
func (c *replicatedCopy) applyRestore(req *pb.RestoreRequest) (*pb.RestoreResponse, error) {
	resp, err := c.Server.Restore(context.Background(), req)
	if err != nil {
		c.logf("ps %d: the logged restore of step %d failed on this copy: %v (this copy no longer matches the others)", c.me, req.Step, err)
	}
	return resp, err
}

// encodeRows appends the tables' part of an aggregate entry: u32 table
// count, then per table u32 key count, the keys (u64), and the values
// (u32 count, float32 values).
func encodeRows(b []byte, rows []shard.RowGrads) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rows)))
	for _, r := range rows {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Keys)))
		b = append(b, wire.Uint64Bytes(r.Keys)...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Values)))
		b = append(b, wire.Float32Bytes(r.Values)...)
	}
	return b
}

func rowsSize(rows []shard.RowGrads) int {
	n := 4
	for _, r := range rows {
		n += 8 + 8*len(r.Keys) + 4*len(r.Values)
	}
	return n
}

// decodeRows reads what encodeRows wrote.
func decodeRows(data []byte) ([]shard.RowGrads, error) {
	bad := errors.New("malformed aggregate entry: tables")
	if len(data) < 4 {
		return nil, bad
	}
	nt := int(binary.LittleEndian.Uint32(data))
	data = data[4:]
	if nt > len(data)/8 {
		return nil, bad
	}
	rows := make([]shard.RowGrads, nt)
	for i := range rows {
		if len(data) < 4 {
			return nil, bad
		}
		nk := int(binary.LittleEndian.Uint32(data))
		data = data[4:]
		if nk > len(data)/8 {
			return nil, bad
		}
		rows[i].Keys = make([]uint64, nk)
		copy(wire.Uint64Bytes(rows[i].Keys), data[:8*nk])
		data = data[8*nk:]
		if len(data) < 4 {
			return nil, bad
		}
		nv := int(binary.LittleEndian.Uint32(data))
		data = data[4:]
		if nv > len(data)/4 {
			return nil, bad
		}
		rows[i].Values = make([]float32, nv)
		copy(wire.Float32Bytes(rows[i].Values), data[:4*nv])
		data = data[4*nv:]
	}
	if len(data) != 0 {
		return nil, errors.New("malformed aggregate entry: trailing bytes")
	}
	return rows, nil
}
