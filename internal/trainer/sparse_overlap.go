package trainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
)

// sparseOverlapLoop is sparseLoop with the round trip of batch t-1 (push
// its gradients, pull the dense values and the rows of batch t+1) in
// flight while batch t is computed, as overlapLoop does for dense models.
// The model reads one batch ahead (model.SparseReadAhead): batch t+1's
// keys are known before batch t is computed, and batch t+2's are read
// while batch t's round trip is still out.
//
// One call is in flight at a time, so a worker has at most one push out
// while it computes, and each batch's gradients are one round of pushes
// staler than without the overlap (the rows of batch t were pulled before
// batch t-1's push was applied); overlaps decides when that is allowed. A
// push is tagged with the global step its rows and dense values were
// pulled at, so the ps counts its staleness.
//
// Buffers: two sets of dense values and rows (the call in flight writes
// one while the model reads the other), two of gradients (the call reads
// one while the model writes the other), and two copies of pushed keys (a
// batch's keys stay valid only until the model's next batch but one, which
// the read-ahead reaches before the batch's push is sent).
//
// The gradients computed when the goal is reached are not pushed; the last
// batch of the data (--epochs) is pushed and waited for. When a call
// fails, the batches read and not sent are kept for the loop after the
// recovery (heldBatches), the gradients computed and not sent with them.
// st.compute counts
// the model's work (gradients and reading batches), st.comm the sending
// and the waiting for calls, not the time a call was in flight under the
// compute.
func sparseOverlapLoop(ctx context.Context, cfg Config, c psClient, m model.SparseReadAhead, params model.Params, lw *lifecycle.Worker, st *loopStats) error {
	tables := m.Tables()
	st.lookup = func(t int, keys []uint64, out []float32) error {
		_, err := c.PullRows(ctx, 0, tables[t].Name, keys, out)
		return err
	}
	q := newBatchQueue(m, st)
	keys, err := q.next()
	if errors.Is(err, model.ErrEndOfData) {
		return pushHeldAtEnd(ctx, cfg, c, q, params, st)
	}
	if err != nil {
		return err
	}
	o := &sparseOverlap{ctx: ctx, cfg: cfg, c: c, m: m, lw: lw, st: st, q: q, tables: tables}
	o.ps = [2]model.Params{params, model.NewParams(m.Variables())}
	o.gs = [2]model.Params{q.held.grads, model.NewParams(m.Variables())}
	if o.gs[0] == nil {
		o.gs[0] = model.NewParams(m.Variables())
	}
	for i := range 2 {
		o.sets[i] = make([]client.Rows, len(tables))
		o.rowGrads[i] = make([][]float32, len(tables))
		o.pushKeys[i] = make([][]uint64, len(tables))
		o.pushed[i] = make([]client.Rows, len(tables))
	}
	if q.held.grads != nil {
		o.pushed[0] = q.held.rows // (its keys are the loop's copy)
	}
	defer func() {
		if o.inflight != nil {
			_ = o.inflight.Wait() // the buffers are lent to it until it lands
		}
		if o.cur != 0 {
			copyParams(params, o.ps[o.cur])
		}
	}()
	return o.run(keys)
}

// pushHeldAtEnd is the overlap loop back after a recovery with no batch
// left to read: it pulls, and pushes the gradients of the last batch if
// they were computed and not sent.
func pushHeldAtEnd(ctx context.Context, cfg Config, c psClient, q *batchQueue, params model.Params, st *loopStats) error {
	var err error
	if st.step, err = c.Pull(ctx, 0, params); err != nil {
		return q.hold(st, fmt.Errorf("pull: %w", err), false, nil, nil)
	}
	if q.held.grads != nil {
		// Back after a recovery with only the gradients of the last
		// batch to push.
		call := c.Do(ctx, &client.Request{Push: true, Step: st.step, Grads: q.held.grads, SparseGrads: q.held.rows, Pull: true, Params: params})
		q.held.grads, q.held.rows = nil, nil // sent
		if call.Err != nil {
			return q.hold(st, fmt.Errorf("step %d: %w", st.step, call.Err), false, nil, nil)
		}
		st.step = call.Step
		st.local++
	}
	endOfData(cfg, st)
	return nil
}

// sparseOverlap is the state of one sparseOverlapLoop: its buffers (see
// there) and the call in flight. It is used by the loop's goroutine only.
type sparseOverlap struct {
	ctx    context.Context
	cfg    Config
	c      psClient
	m      model.SparseReadAhead
	lw     *lifecycle.Worker
	st     *loopStats
	q      *batchQueue
	tables []model.Table

	ps, gs   [2]model.Params
	sets     [2][]client.Rows // the rows pulled into set i, with their keys
	pulledAt [2]int64         // the global step set i (dense and rows) was pulled at
	rowGrads [2][][]float32
	pushKeys [2][][]uint64
	pushed   [2][]client.Rows
	cur, g   int // the set computed from; the gradients written next

	inflight *client.Call
	pushing  bool  // the call in flight carries a push
	sentAt   int64 // the step its gradients were computed at
}

// fill makes set i the rows of keys, zeroed, for a pull.
func (o *sparseOverlap) fill(i int, keys [][]uint64) {
	for t, tb := range o.tables {
		o.sets[i][t] = client.Rows{Table: tb.Name, Keys: keys[t], Values: zeroed(o.sets[i][t].Values, len(keys[t])*tb.Dim)}
	}
}

// readAhead reads the next batch into set i; false: the data ended.
func (o *sparseOverlap) readAhead(i int) (bool, error) {
	next, err := o.q.next()
	if errors.Is(err, model.ErrEndOfData) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("step %d: next batch: %w", o.st.step, err)
	}
	o.fill(i, next)
	return true, nil
}

// send makes the call of the gradients in g, computed from set from, that
// pulls into set to (rows too if withRows).
func (o *sparseOverlap) send(push bool, from, to int, withRows bool) {
	t := time.Now()
	req := &client.Request{Pull: true, Params: o.ps[to]}
	if withRows {
		req.SparseParams = o.sets[to]
	}
	if push {
		req.Push, req.Step, req.Grads, req.SparseGrads = true, o.pulledAt[from], o.gs[o.g], o.pushed[o.g]
		o.sentAt = o.pulledAt[from]
		if o.q.held.grads != nil {
			o.q.held.grads, o.q.held.rows = nil, nil // those of a batch before the recovery
		} else {
			o.q.sent()
		}
	}
	o.inflight, o.pushing = o.c.Send(o.ctx, req), push
	o.st.comm += time.Since(t)
}

// awaitInFlight waits for the call in flight, which pulled into the other
// set: that set becomes the current one. No lifecycle.RestartWatch: the
// overlap runs only in asynchronous modes, where no step waits on another
// worker's gradient.
func (o *sparseOverlap) awaitInFlight() error {
	call := o.inflight
	o.inflight = nil
	o.cur ^= 1
	if o.pushing {
		if _, err := o.st.completeStep(o.ctx, o.cfg, o.m, o.ps[o.cur], o.lw, o.sentAt, call, nil); err != nil {
			return err
		}
	} else {
		t := time.Now()
		if err := lifecycle.WaitCall(call, o.cfg.callLog(), o.st.step, 0, nil); err != nil {
			return fmt.Errorf("pull: %w", err)
		}
		o.st.comm += time.Since(t)
		o.st.step = call.Step
	}
	o.pulledAt[o.cur] = call.Step
	return nil
}

// compute computes the gradients of the batch in the current set into g
// (ahead: the model has read the next batch already) and copies out the
// keys they are pushed with.
func (o *sparseOverlap) compute(rows [][]float32, ahead bool) error {
	st, cur, g := o.st, o.cur, o.g
	for t := range o.tables {
		rows[t] = o.sets[cur][t].Values
		o.rowGrads[g][t] = zeroed(o.rowGrads[g][t], len(rows[t]))
	}
	var err error
	if ahead {
		st.loss, err = o.m.PrevSparseGradients(o.ps[cur], o.gs[g], rows, o.rowGrads[g])
	} else {
		st.loss, err = o.m.SparseGradients(o.ps[cur], o.gs[g], rows, o.rowGrads[g])
	}
	if err != nil {
		return fmt.Errorf("step %d: %w", st.step, err)
	}
	for t, tb := range o.tables {
		o.pushKeys[g][t] = append(o.pushKeys[g][t][:0], o.sets[cur][t].Keys...)
		o.pushed[g][t] = client.Rows{Table: tb.Name, Keys: o.pushKeys[g][t], Values: o.rowGrads[g][t]}
	}
	return nil
}

// run trains from the batch of keys on.
func (o *sparseOverlap) run(keys [][]uint64) error {
	st, q := o.st, o.q
	o.fill(o.cur, keys)
	call := o.c.Do(o.ctx, &client.Request{Pull: true, Params: o.ps[o.cur], SparseParams: o.sets[o.cur]})
	if call.Err != nil {
		return q.hold(st, fmt.Errorf("pull: %w", call.Err), false, nil, nil)
	}
	st.step, o.pulledAt[o.cur] = call.Step, call.Step
	if st.step >= o.cfg.TrainSteps {
		return nil
	}
	// ahead: batch t+1 is read and its rows are pulled into the other set
	// by the call in flight (or a push of batch t-1's gradients is in
	// flight and t is the last batch).
	ahead, err := o.readAhead(o.cur ^ 1)
	if err != nil {
		return err
	}
	switch {
	case q.held.grads != nil:
		// Back after a recovery with the gradients of a batch computed
		// and not sent: they go first.
		o.send(true, o.cur, o.cur^1, ahead)
		o.g ^= 1
	case ahead:
		o.send(false, o.cur, o.cur^1, true)
	}
	rows := make([][]float32, len(o.tables))
	for {
		t0 := time.Now()
		if err := o.compute(rows, ahead); err != nil {
			return err
		}
		// Batch t+2's rows go into this batch's set, computed from and
		// copied out; the call in flight writes the other.
		more := false
		if ahead {
			if more, err = o.readAhead(o.cur); err != nil {
				return err
			}
		}
		st.lastCompute = time.Since(t0)
		st.compute += st.lastCompute
		from := o.cur
		if o.inflight != nil {
			if err := o.awaitInFlight(); err != nil {
				return q.hold(st, err, true, o.gs[o.g], o.pushed[o.g])
			}
			if st.step >= o.cfg.TrainSteps {
				return nil
			}
		}
		if !ahead {
			// The last batch of the data: push it and wait.
			o.send(true, from, o.cur^1, false)
			o.g ^= 1
			if err := o.awaitInFlight(); err != nil {
				return q.hold(st, err, false, nil, nil)
			}
			endOfData(o.cfg, st)
			return nil
		}
		o.send(true, from, o.cur^1, more)
		o.g ^= 1
		ahead = more
	}
}
