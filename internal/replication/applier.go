package replication

import (
	"context"
	"sync"

	"github.com/paramserv/paramserv/internal/replica"
)

// applier applies a copy's log entries on a goroutine of its own, in log
// order, so that the replication host (whose lock is held to acknowledge
// pushes, answer the other copies and renew leases for every shard of the
// ps) never waits for an optimizer update: a backup's acknowledgement and the
// primary's next append go out while the update runs. What reads the copy
// waits for the entries handed out before it (wait): a pull (after
// Serving), a call's own result, and a takeover's log line.
type applier struct {
	apply func(replica.Entry)

	mu      sync.Mutex
	queue   []replica.Entry
	handed  uint64        // entries handed out by the host
	applied uint64        // entries applied
	moved   chan struct{} // closed and replaced when applied grows or the applier stops
	wake    chan struct{} // one token: the queue has entries
	stopped bool
}

func newApplier(apply func(replica.Entry)) *applier {
	return &applier{apply: apply, moved: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// add queues an entry (the replication host's Apply).
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

// gcFloor is a heap allocation a replicated ps holds and never touches,
// so that the garbage collector runs about once per gcFloor bytes
// allocated rather than each time the heap doubles. A replicated push
// leaves a push-sized buffer behind on every copy (the log entry, until
// the next message commits it); for a shard whose state is small next to
// its pushes (MNIST: 4 MB live, 0.4 MB per push) the heap doubled every
// few pushes, and a ps ran about 120 collections per 1500 steps, each
// stopping the process for 0.6 to 3.5 ms on a loaded machine. With the
// floor it runs a few. The floor itself is reserved, not used (the
// runtime never writes to a fresh pointer-free allocation, nor scans it),
// but the garbage between collections is: a replicated ps's resident
// memory grows by up to about gcFloor (MNIST: ps 0 at 94 MB against 25).
const gcFloor = 64 << 20

// holdGCFloor allocates the floor; keep the result alive (runtime.KeepAlive)
// as long as the ps runs.
func holdGCFloor() []byte { return make([]byte, gcFloor) }
