package server

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/wire/pb"
)

// FSM is a Server as one copy of a replicated shard: the state machine the
// shard's log drives (replication.FSM, after hashicorp/raft's FSM). Every
// copy applies the same entries in the same order with Apply, a copy is
// read whole with Snapshot for a ps that rejoins and replaced with Restore
// there. The entries are the Server's own requests, encoded by EncodeEntry,
// EncodeAggregate and EncodeTouch (entry.go).
//
// Concurrency: Apply is called by one goroutine at a time (the copy's
// applier), in log order; Snapshot and Restore only while no Apply runs.
// The Server's own lock guards its state, as for its RPCs.
type FSM struct {
	s       *Server
	ps      int       // the ps this copy runs on, for the log
	scratch []float32 // Apply's: a backup's gradients, decoded (decodeDensePush)
}

// NewFSM is s as a copy of a replicated shard held by ps.
func NewFSM(s *Server, ps int) *FSM { return &FSM{s: s, ps: ps} }

// Apply applies log entry seq, whose bytes are data, to this copy and
// returns its result. own is the request the entry was encoded from when
// the call waiting for it is this copy's own (nil otherwise): the copy
// applies it from there rather than decoding the entry (no decoding, and
// the data path's gradients stay in its connection's buffers).
func (f *FSM) Apply(seq uint64, data []byte, own proto.Message) (proto.Message, error) {
	s, ctx := f.s, context.Background()
	switch data[0] {
	case entryPush:
		req, _ := own.(*pb.PushRequest)
		if req == nil {
			var ok bool
			if req, ok = decodeDensePush(data[1:], &f.scratch); !ok {
				req = &pb.PushRequest{}
				if err := proto.Unmarshal(data[1:], req); err != nil {
					return nil, err
				}
			}
		}
		return s.Push(ctx, req)
	case entryInit:
		req := &pb.InitRequest{}
		if err := proto.Unmarshal(data[1:], req); err != nil {
			return nil, err
		}
		return s.Init(ctx, req)
	case entryAggregate:
		err := f.applyAggregate(data[1:])
		if err != nil {
			s.cfg.Logf("log entry %d: %v", seq, err)
		}
		return nil, err
	case entryDone:
		req := &pb.DoneRequest{}
		if err := proto.Unmarshal(data[1:], req); err != nil {
			return nil, err
		}
		return s.Done(ctx, req)
	case entryTouch:
		err := f.applyTouch(data[1:])
		if err != nil {
			s.cfg.Logf("log entry %d: %v", seq, err)
		}
		return nil, err
	case entryChangeRate:
		req := &pb.ChangeRateRequest{}
		if err := proto.Unmarshal(data[1:], req); err != nil {
			return nil, err
		}
		return s.ChangeRate(ctx, req)
	case entryHeard:
		from, ago, err := decodeHeard(data[1:])
		if err != nil {
			err = fmt.Errorf("shard %d: %w", s.cfg.Task, err)
			s.cfg.Logf("log entry %d: %v", seq, err)
			return nil, err
		}
		if from != f.ps { // the primary that logged it heard them itself
			s.HeardOf(ago)
		}
		return nil, nil
	case entryRestore:
		req := &pb.RestoreRequest{}
		if err := proto.Unmarshal(data[1:], req); err != nil {
			return nil, err
		}
		return f.applyRestore(req)
	}
	return nil, fmt.Errorf("shard %d: log entry %d of unknown kind %d", s.cfg.Task, seq, data[0])
}

// Snapshot is this copy whole, for a ps that rejoins (EncodeCopy).
func (f *FSM) Snapshot() ([]byte, error) { return f.s.EncodeCopy() }

// Restore replaces this copy by another ps's Snapshot (InstallCopy).
func (f *FSM) Restore(snapshot []byte) error { return f.s.InstallCopy(snapshot) }

// applyAggregate applies an aggregate entry's bytes to this copy.
func (f *FSM) applyAggregate(data []byte) error {
	step, grads, rows, err := decodeAggregate(data)
	if err != nil {
		return fmt.Errorf("shard %d: %w", f.s.cfg.Task, err)
	}
	return f.s.ApplyAggregate(step, grads, rows)
}

// applyTouch applies a logged pull to this copy.
func (f *FSM) applyTouch(data []byte) error {
	rows, err := decodeTouch(data)
	if err != nil {
		return fmt.Errorf("shard %d: %w", f.s.cfg.Task, err)
	}
	return f.s.TouchRows(rows)
}

// applyRestore applies a logged Restore to this copy. A copy that cannot
// restore (its checkpoint directory lacks the checkpoint) no longer holds
// what the others hold: it says so loudly.
func (f *FSM) applyRestore(req *pb.RestoreRequest) (*pb.RestoreResponse, error) {
	resp, err := f.s.Restore(context.Background(), req)
	if err != nil {
		f.s.cfg.Logf("ps %d: the logged restore of step %d failed on this copy: %v (this copy no longer matches the others)", f.ps, req.Step, err)
	}
	return resp, err
}
