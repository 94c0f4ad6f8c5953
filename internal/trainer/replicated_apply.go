package trainer

import (
	"context"
	"sync"

	"github.com/paramserv/paramserv/internal/replica"
)

// applier applies a copy's log entries on a goroutine of its own, in log
// order, so that the replication loop (which acknowledges pushes, answers
// the other copies and renews leases for every shard of the ps) never
// waits for an optimizer update: a backup's acknowledgement and the
// primary's next append go out while the update runs. What reads the copy
// waits for the entries handed out before it (wait): a pull (after
// Serving), a call's own result, and a takeover's log line.
type applier struct {
	apply func(replica.Entry)

	mu      sync.Mutex
	queue   []replica.Entry
	handed  uint64        // entries handed out by the loop
	applied uint64        // entries applied
	moved   chan struct{} // closed and replaced when applied grows or the applier stops
	wake    chan struct{} // one token: the queue has entries
	stopped bool
}

func newApplier(apply func(replica.Entry)) *applier {
	return &applier{apply: apply, moved: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// add queues an entry (the replication loop's Apply).
func (a *applier) add(e replica.Entry) {
	a.mu.Lock()
	a.queue = append(a.queue, e)
	a.handed++
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// run applies the queue until stop.
func (a *applier) run(stop <-chan struct{}) {
	defer func() {
		a.mu.Lock()
		a.stopped = true
		close(a.moved)
		a.mu.Unlock()
	}()
	for {
		select {
		case <-stop:
			return
		case <-a.wake:
		}
		for {
			a.mu.Lock()
			if len(a.queue) == 0 {
				a.mu.Unlock()
				break
			}
			e := a.queue[0]
			a.queue[0] = replica.Entry{}
			a.queue = a.queue[1:]
			a.mu.Unlock()
			a.apply(e)
			a.mu.Lock()
			a.applied++
			close(a.moved)
			a.moved = make(chan struct{})
			a.mu.Unlock()
		}
	}
}

// mark is the count of entries handed out so far: wait(mark) returns once
// they are applied.
func (a *applier) mark() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.handed
}

// wait waits until n entries are applied, ctx ends (its error) or the
// applier stops (nil: nothing more will be applied).
func (a *applier) wait(ctx context.Context, n uint64) error { return a.waitFor(ctx, n, nil) }

// waitFor is wait that also returns as soon as done reports true (checked
// after each entry applied).
func (a *applier) waitFor(ctx context.Context, n uint64, done func() bool) error {
	for {
		a.mu.Lock()
		if a.applied >= n || a.stopped || (done != nil && done()) {
			a.mu.Unlock()
			return nil
		}
		ch := a.moved
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
