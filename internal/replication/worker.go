package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/cluster"
)

// WorkerConfig is a worker's side of replicated shards: connections that
// fail over to a shard's copies, and steps sent again while they take over.
type WorkerConfig struct {
	Options
	// Cluster is the job's cluster and this worker's task in it.
	Cluster cluster.Config
	// Dial connects to an address (net.Dialer's if nil); Dialer's
	// connections go through it.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// RecoveryTimeout bounds ResendAfterFailover (--recovery_timeout).
	RecoveryTimeout time.Duration
	// WaitLogEvery is how often a resend logs that it goes on.
	WaitLogEvery time.Duration
	// Logf receives the log lines; nil discards them.
	Logf func(format string, args ...any)
}

func (w *WorkerConfig) defaults() {
	if w.Logf == nil {
		w.Logf = func(string, ...any) {}
	}
}

// CheckWorker says what is wrong with a worker's settings under o for a
// cluster of numPS ps: sparse is whether its model has sparse tables,
// incrementalPull whether it asks for --incremental_pull (replicated
// shards answer full pulls only: a copy that takes over holds other row
// versions than the ones the worker was told).
func (o Options) CheckWorker(numPS int, sparse, incrementalPull bool) error {
	if sparse && incrementalPull {
		return fmt.Errorf("--replicas=%d with --incremental_pull: replicated shards answer full pulls only (a copy that takes over numbers its row versions afresh); drop --incremental_pull", o.Replicas)
	}
	return o.Check(numPS)
}

// Dialer is a worker's dialler under --replicas: the connection for ps s
// goes to the first copy of shard s that accepts it; a later copy is tried
// only once the earlier have refused for the failover timeout. A copy
// reached while its primary lives (a ps slow to start) answers Unavailable
// after three timeouts and drops the connection, and the next dial tries
// the primary first again.
func (w WorkerConfig) Dialer() func(ctx context.Context, addr string) (net.Conn, error) {
	w.defaults()
	base := w.Dial
	if base == nil {
		var d net.Dialer
		base = func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }
	}
	byAddr := map[string][]string{}
	for s, a := range w.Cluster.Spec.PS {
		byAddr[a] = w.copies(s, w.Cluster.Spec.PS)
	}
	var mu sync.Mutex
	failingSince := map[string]time.Time{}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		cs := byAddr[addr]
		if cs == nil {
			return base(ctx, addr)
		}
		var firstErr error
		for i, a := range cs {
			dctx, cancel := context.WithTimeout(ctx, w.FailoverTimeout)
			c, err := base(dctx, a)
			cancel()
			mu.Lock()
			if err == nil {
				delete(failingSince, a)
				mu.Unlock()
				if i > 0 {
					w.Logf("worker %d: shard %d: connected to its copy at %s (earlier copies do not answer)", w.Cluster.Task.Index, indexOf(w.Cluster.Spec.PS, addr), a)
				}
				return c, nil
			}
			t, ok := failingSince[a]
			if !ok {
				t = time.Now()
				failingSince[a] = t
			}
			mu.Unlock()
			if firstErr == nil {
				firstErr = err
			}
			if i+1 < len(cs) {
				// Give this copy the failover timeout before the next: a
				// copy takes over only after it (and answers meanwhile by
				// waiting for the takeover).
				if err := sleepCtx(ctx, time.Until(t.Add(w.FailoverTimeout))); err != nil {
					return nil, firstErr
				}
			}
		}
		return nil, firstErr
	}
}

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

// ResendAfterFailover sends a step's push and pull again, the same
// gradients with the same request id, while the copies of a lost ps's
// shards take over: a shard that applied the push recognises the resend,
// the others apply it, so the step is applied once everywhere, as in the
// job undisturbed. It gives up after --recovery_timeout, or on an error
// no failover cures, returning the last error to the usual recovery.
func (w WorkerConfig) ResendAfterFailover(ctx context.Context, step int64, err error, send func(context.Context) (int64, error)) (int64, error) {
	w.defaults()
	start := time.Now()
	// One resend may itself wait (a copy holding the push unacknowledged):
	// the bound covers it too, not only the loop.
	bound := fmt.Errorf("--recovery_timeout=%s passed while step %d was sent again to the shards' copies", w.RecoveryTimeout, step)
	rctx, cancel := context.WithDeadlineCause(ctx, start.Add(w.RecoveryTimeout), bound)
	defer cancel()
	lastLog := time.Time{}
	var restarted *client.RestartedError // a ps restored a checkpoint (the cluster re-formed): the usual recovery
	for err != nil && client.Retryable(err) && !errors.As(err, &restarted) && ctx.Err() == nil && time.Since(start) < w.RecoveryTimeout {
		if time.Since(lastLog) >= w.WaitLogEvery {
			w.Logf("worker %d: at global step %d: %v; sending the step again while the shards fail over", w.Cluster.Task.Index, step, err)
			lastLog = time.Now()
		}
		if serr := sleepCtx(rctx, 20*time.Millisecond); serr != nil {
			break
		}
		s, serr := send(rctx)
		if serr == nil {
			w.Logf("worker %d: step %d acknowledged after failover, %s after the first failure", w.Cluster.Task.Index, step, time.Since(start).Round(time.Millisecond))
			return s, nil
		}
		if ctx.Err() == nil && rctx.Err() != nil {
			// The bound cut this resend short: the last failover error goes
			// to the usual recovery, as when the loop runs out of time.
			w.Logf("worker %d: %v", w.Cluster.Task.Index, context.Cause(rctx))
			return step, err
		}
		err = serr
	}
	return step, err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
