package server

import (
	"time"

	"github.com/paramserv/paramserv/internal/progress"
	"github.com/paramserv/paramserv/internal/shard"
)

// Observer is told what the ps does, for its metrics (package telemetry
// implements it). The methods run on the request's goroutine, most with
// the server's lock held: they must be quick and must not call the server.
type Observer interface {
	// Pushed: a push was checked and applied, accumulated or dropped, as
	// verdict says ("apply", "accumulate", "complete", "drop-stale",
	// "drop-duplicate"); the bytes of dense and sparse (keys and values)
	// gradients it carried; took: the check and the update.
	Pushed(verdict string, denseBytes, sparseBytes int, took time.Duration)
	// Rejected: a push refused before anything was applied; reason is the
	// kind of error ("invalid request", "not ready", "behind", ...).
	Rejected(reason string)
	// Pulled: a pull answered with the bytes of dense values and of rows;
	// took: from the request to the reply made, any wait for the step
	// included.
	Pulled(denseBytes, sparseBytes int, took time.Duration)
	// SyncWaited: a pull waited this long for its step (synchronous mode,
	// or a worker ahead).
	SyncWaited(d time.Duration)
	// CheckpointSaved: this ps wrote its shard of a checkpoint (bytes) or
	// failed to (err).
	CheckpointSaved(bytes int64, took time.Duration, err error)
	// CheckpointRestored: this ps restored a checkpoint, at start
	// (atStart) or at the chief's request (a recovery's rollback).
	CheckpointRestored(atStart bool, bytes int64, took time.Duration, err error)
	// RestoreProgress: how far the reading of a checkpoint's shard files
	// has come, as they are read: u.What names the phase (verifying the
	// newest checkpoint at start, then restoring it); u.Total is 0 when
	// not known. A new read starts from 0 bytes.
	RestoreProgress(u progress.Update)
}

type nopObserver struct{}

func (nopObserver) Pushed(string, int, int, time.Duration)               {}
func (nopObserver) Rejected(string)                                      {}
func (nopObserver) Pulled(int, int, time.Duration)                       {}
func (nopObserver) SyncWaited(time.Duration)                             {}
func (nopObserver) CheckpointSaved(int64, time.Duration, error)          {}
func (nopObserver) CheckpointRestored(bool, int64, time.Duration, error) {}
func (nopObserver) RestoreProgress(progress.Update)                      {}

// pushBytes counts the bytes of a push's gradients: dense values, and the
// rows' keys and values.
func pushBytes(p *shard.Push) (dense, sparse int) {
	for i := range p.Dense {
		dense += 4 * len(p.Dense[i].Values)
	}
	for i := range p.Sparse {
		g := &p.Sparse[i]
		n := len(g.Keys)
		if g.Set != nil {
			n = g.Set.Len()
		}
		sparse += 8*n + 4*len(g.Values)
	}
	return dense, sparse
}

// rejectReason names the kind of a push's error for Observer.Rejected.
func rejectReason(err error) string {
	if k := shard.KindOf(err); k != 0 {
		return k.String()
	}
	return "other"
}
