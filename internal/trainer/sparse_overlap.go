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
// recovery (heldBatches), the gradients computed and not sent with them. st.compute counts
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
	if err != nil {
		return err
	}
	ps := [2]model.Params{params, model.NewParams(m.Variables())}
	gs := [2]model.Params{q.held.grads, model.NewParams(m.Variables())}
	if gs[0] == nil {
		gs[0] = model.NewParams(m.Variables())
	}
	var (
		sets     [2][]client.Rows // the rows pulled into set i, with their keys
		pulledAt [2]int64         // the global step set i (dense and rows) was pulled at
		rowGrads [2][][]float32
		pushKeys [2][][]uint64
		pushed   [2][]client.Rows
	)
	for i := range 2 {
		sets[i] = make([]client.Rows, len(tables))
		rowGrads[i] = make([][]float32, len(tables))
		pushKeys[i] = make([][]uint64, len(tables))
		pushed[i] = make([]client.Rows, len(tables))
	}
	fill := func(i int, keys [][]uint64) {
		for t, tb := range tables {
			sets[i][t] = client.Rows{Table: tb.Name, Keys: keys[t], Values: zeroed(sets[i][t].Values, len(keys[t])*tb.Dim)}
		}
	}
	if q.held.grads != nil {
		pushed[0] = q.held.rows // (its keys are the loop's copy)
	}
	// readAhead reads the next batch into set i; false: the data ended.
	readAhead := func(i int) (bool, error) {
		next, err := q.next()
		if errors.Is(err, model.ErrEndOfData) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("step %d: next batch: %w", st.step, err)
		}
		fill(i, next)
		return true, nil
	}

	cur, g := 0, 0 // the set computed from; the gradients written next
	fill(cur, keys)
	call := c.Do(ctx, &client.Request{Pull: true, Params: ps[cur], SparseParams: sets[cur]})
	if call.Err != nil {
		return q.hold(st, fmt.Errorf("pull: %w", call.Err), false, nil, nil)
	}
	st.step, pulledAt[cur] = call.Step, call.Step
	if st.step >= cfg.TrainSteps {
		return nil
	}
	var inflight *client.Call
	var pushing bool // the call in flight carries a push
	var sentAt int64 // the step its gradients were computed at
	defer func() {
		if inflight != nil {
			_ = inflight.Wait() // the buffers are lent to it until it lands
		}
		if cur != 0 {
			copy2(params, ps[cur])
		}
	}()
	// send makes the call of the gradients in g, computed from set from,
	// that pulls into set to (rows too if withRows).
	send := func(push bool, from, to int, withRows bool) {
		t := time.Now()
		req := &client.Request{Pull: true, Params: ps[to]}
		if withRows {
			req.SparseParams = sets[to]
		}
		if push {
			req.Push, req.Step, req.Grads, req.SparseGrads = true, pulledAt[from], gs[g], pushed[g]
			sentAt = pulledAt[from]
			if q.held.grads != nil {
				q.held.grads, q.held.rows = nil, nil // those of a batch before the recovery
			} else {
				q.sent()
			}
		}
		inflight, pushing = c.Send(ctx, req), push
		st.comm += time.Since(t)
	}
	// land waits for the call in flight, which pulled into the other set:
	// that set becomes the current one.
	// No lifecycle.RestartWatch: the overlap runs only in asynchronous modes, where no
	// step waits on another worker's gradient.
	land := func() error {
		call := inflight
		inflight = nil
		cur ^= 1
		if pushing {
			if _, err := st.land(ctx, cfg, m, ps[cur], lw, sentAt, call, nil); err != nil {
				return err
			}
		} else {
			t := time.Now()
			if err := lifecycle.WaitCall(call, cfg.callLog(), st.step, 0, nil); err != nil {
				return fmt.Errorf("pull: %w", err)
			}
			st.comm += time.Since(t)
			st.step = call.Step
		}
		pulledAt[cur] = call.Step
		return nil
	}

	// ahead: batch t+1 is read and its rows are pulled into the other set
	// by the call in flight (or a push of batch t-1's gradients is in
	// flight and t is the last batch).
	ahead, err := readAhead(cur ^ 1)
	if err != nil {
		return err
	}
	switch {
	case q.held.grads != nil:
		// Back after a recovery with the gradients of a batch computed
		// and not sent: they go first.
		send(true, cur, cur^1, ahead)
		g ^= 1
	case ahead:
		send(false, cur, cur^1, true)
	}
	rows := make([][]float32, len(tables))
	for {
		t0 := time.Now()
		for t := range tables {
			rows[t] = sets[cur][t].Values
			rowGrads[g][t] = zeroed(rowGrads[g][t], len(rows[t]))
		}
		if ahead {
			st.loss, err = m.PrevSparseGradients(ps[cur], gs[g], rows, rowGrads[g])
		} else {
			st.loss, err = m.SparseGradients(ps[cur], gs[g], rows, rowGrads[g])
		}
		if err != nil {
			return fmt.Errorf("step %d: %w", st.step, err)
		}
		for t, tb := range tables {
			pushKeys[g][t] = append(pushKeys[g][t][:0], sets[cur][t].Keys...)
			pushed[g][t] = client.Rows{Table: tb.Name, Keys: pushKeys[g][t], Values: rowGrads[g][t]}
		}
		// Batch t+2's rows go into this batch's set, computed from and
		// copied out; the call in flight writes the other.
		more := false
		if ahead {
			if more, err = readAhead(cur); err != nil {
				return err
			}
		}
		st.lastCompute = time.Since(t0)
		st.compute += st.lastCompute
		from := cur
		if inflight != nil {
			if err := land(); err != nil {
				return q.hold(st, err, true, gs[g], pushed[g])
			}
			if st.step >= cfg.TrainSteps {
				return nil
			}
		}
		if !ahead {
			// The last batch of the data: push it and wait.
			send(true, from, cur^1, false)
			g ^= 1
			if err := land(); err != nil {
				return q.hold(st, err, false, nil, nil)
			}
			endOfData(cfg, st)
			return nil
		}
		send(true, from, cur^1, more)
		g ^= 1
		ahead = more
	}
}
