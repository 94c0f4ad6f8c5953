package paramserv

import (
	"context"

	"github.com/paramserv/paramserv/internal/model"
)

// Call is a Pull, Push, PushPull or PullRows in flight, started by one of a
// Worker's …Async methods, so that the program computes while the values
// travel. The buffers given to the call belong to it until it has
// finished: do not read or write them before Done is closed (or Wait has
// returned).
//
// A Worker runs its calls one at a time, in the order they were started:
// a second …Async call starts once the first has finished, and a blocking
// method (Pull, Push, PushPull, PushPullRows, PullRows, PushRows,
// PullTables, Step, Done, Close) first waits for the calls in flight. A call that fails (its error
// returned by Wait) does not stop the ones after it.
type Call struct {
	done chan struct{}
	step int64
	err  error
}

// Done is closed when the call has finished.
func (c *Call) Done() <-chan struct{} { return c.done }

// Wait waits for the call to finish and returns what its blocking form
// returns: the global step of the values it read, and its error. It may be
// called any number of times.
func (c *Call) Wait() (step int64, err error) {
	<-c.done
	return c.step, c.err
}

// PullAsync is Pull without waiting: params is filled once the call is
// done.
func (w *Worker) PullAsync(ctx context.Context, params Params) *Call {
	return w.async(ctx, "PullAsync", func() (int64, error) { return w.s.Pull(ctx, mparams(params)) })
}

// PushPullAsync is PushPull without waiting: grads is pushed and params
// filled with the next values once the call is done. The gradients are
// counted as computed at the step of the values the worker pulled last
// (when the call starts, after the calls before it). Computing the next
// gradients at older values while a push is in flight is asynchronous
// training's trade; in synchronous training PushPullAsync still waits for
// the step to complete before it is done.
//
// A loop that overlaps each push with the next gradient's computation
// holds two sets of values and alternates between them (see the example).
func (w *Worker) PushPullAsync(ctx context.Context, grads, params Params) *Call {
	return w.PushPullRowsAsync(ctx, grads, params, nil)
}

// PushAsync is Push without waiting: grads must not change until the call
// is done.
func (w *Worker) PushAsync(ctx context.Context, grads Params) *Call {
	return w.async(ctx, "PushAsync", func() (int64, error) { return w.s.Push(ctx, model.Params(grads), nil) })
}

// PushPullRowsAsync is PushPullRows without waiting.
func (w *Worker) PushPullRowsAsync(ctx context.Context, grads, params Params, rows []Rows) *Call {
	rs := sessionRows(rows)
	return w.async(ctx, "PushPullRowsAsync", func() (int64, error) { return w.s.PushPullRows(ctx, mparams(grads), mparams(params), rs) })
}

// PullRowsAsync is PullRows without waiting (to read the next batch's rows
// while this batch computes): out is filled once the call is done, and
// Wait's step is the worker's step.
func (w *Worker) PullRowsAsync(ctx context.Context, table string, keys []uint64, out []float32) *Call {
	return w.async(ctx, "PullRowsAsync", func() (int64, error) {
		err := w.s.PullRows(ctx, table, keys, out)
		return w.s.Step(), err
	})
}

// async runs f, the call named call, in the background after the calls
// started before it; after Close the call fails at once.
func (w *Worker) async(ctx context.Context, call string, f func() (int64, error)) *Call {
	c := &Call{done: make(chan struct{})}
	if err := w.closedErr(call); err != nil {
		c.step, c.err = w.s.Step(), err
		close(c.done)
		return c
	}
	prev := w.last
	w.last = c
	go func() {
		defer close(c.done)
		if prev != nil {
			<-prev.done
		}
		c.step, c.err = f()
		c.err = ctxErr(ctx, c.err)
	}()
	return c
}

// waitInFlight waits for the calls in flight (each waits for the one
// before it, so the last one done means all are).
func (w *Worker) waitInFlight() {
	if w.last != nil {
		<-w.last.done
	}
}
