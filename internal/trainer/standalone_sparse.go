package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// Start is Do with the push and the pull run on a goroutine of their own,
// so that the caller can go on (draw the next batch) while the table works.
// The caller must not touch the gradients or the buffers the pull fills
// until call.Done closes, and must then call Ahead once, with the keys of
// the batch after the one pulled (or none): the goroutine looks their rows
// up (creating those not there yet, as that batch's pull would) while the
// caller computes, so that the next pull only copies them. Every other
// call of p waits for the goroutine to end first. The keys of req are taken
// before Start returns (the pushed keys matched against the last pull's,
// which the ps holds, else copied; the pulled keys copied), so the caller
// may reuse those slices at once.
func (p *localPS) Start(ctx context.Context, req *client.Request) *client.Call {
	p.settle()
	done := make(chan struct{})
	call := &client.Call{Done: done}
	if err := stopped(ctx); err != nil {
		call.Err = err
		close(done)
		return call
	}
	own := *req
	own.SparseGrads = slices.Clone(req.SparseGrads)
	for i, r := range own.SparseGrads {
		if ks := p.pulled[r.Table]; ks != nil && slices.Equal(ks.Keys(), r.Keys) {
			own.SparseGrads[i].Keys = ks.Keys() // do finds it the same set
		} else {
			own.SparseGrads[i].Keys = slices.Clone(r.Keys)
		}
	}
	own.SparseParams = slices.Clone(req.SparseParams)
	p.turn ^= 1
	for i, r := range own.SparseParams {
		if len(p.keyCopies[p.turn]) <= i {
			p.keyCopies[p.turn] = append(p.keyCopies[p.turn], nil)
		}
		buf := append(p.keyCopies[p.turn][i][:0], r.Keys...)
		p.keyCopies[p.turn][i] = buf
		own.SparseParams[i].Keys = buf
	}
	idle := make(chan struct{})
	p.idle, p.waiting = idle, true
	go func() {
		defer close(idle)
		err := p.do(&own, call)
		call.Err = err
		close(done)
		// The caller computes now; it hands over the next batch's keys
		// as soon as it has drawn them (Ahead), before it computes.
		next := <-p.handoff
		if err != nil {
			return
		}
		for _, r := range next {
			a := p.ahead[r.Table]
			if a == nil {
				a = &sparse.KeySet{}
				p.ahead[r.Table] = a
			}
			a.Reset(append(a.Keys()[:0], r.Keys...))
			// Not allowed (or failing): the pull looks them up, and
			// reports the error, as it would have anyway.
			_, _ = p.sh.ResolveRows(p.tableName(r.Table), a)
		}
	}()
	return call
}

// Ahead hands the goroutine of the last Start the keys of the batch after
// the one it pulls (rows with no values; none when there is no such batch).
// It copies them, and never waits.
func (p *localPS) Ahead(rows []client.Rows) {
	if !p.waiting { // Start failed before it began
		return
	}
	p.waiting = false
	p.handed = p.handed[:0]
	for i, r := range rows {
		if i == cap(p.handed) {
			p.handed = append(p.handed, client.Rows{})
		}
		p.handed = p.handed[:i+1]
		p.handed[i] = client.Rows{Table: r.Table, Keys: append(p.handed[i].Keys[:0], r.Keys...)}
	}
	p.handoff <- p.handed
}

// settle waits until the goroutine of the last Start has ended: a few
// milliseconds of table work after its call landed, and its caller has
// handed it its keys (Ahead) by then.
func (p *localPS) settle() {
	if p.idle != nil {
		<-p.idle
		p.idle = nil
	}
}

// sparsePipeLoop is sparseLoop for a standalone job whose model reads a
// batch ahead (model.SparseReadAhead): the same steps in the same order (the
// push of batch t's gradients, then the pull of batch t+1's rows, then
// batch t+1's gradients from those rows), with the same results, but the
// ps's part of each step (localPS.Start) runs on another core while the
// model draws batch t+2 and finds its distinct keys, which need nothing
// from the table.
func sparsePipeLoop(ctx context.Context, cfg Config, p *localPS, m model.SparseReadAhead, params model.Params, st *loopStats) error {
	tables := m.Tables()
	st.lookup = func(t int, keys []uint64, out []float32) error {
		_, err := p.PullRows(ctx, 0, tables[t].Name, keys, out)
		return err
	}
	keys, err := m.NextBatch()
	if errors.Is(err, model.ErrEndOfData) {
		if st.step, err = p.Pull(ctx, 0, params); err != nil {
			return fmt.Errorf("pull: %w", err)
		}
		endOfData(cfg, st)
		return nil
	}
	if err != nil {
		return err
	}
	sets := rowSets{tables: tables}
	rowsFor := sets.of
	cur := rowsFor(0, keys)
	call := p.Do(ctx, &client.Request{Pull: true, Params: params, SparseParams: cur})
	if call.Err != nil {
		return fmt.Errorf("pull: %w", call.Err)
	}
	step := call.Step
	st.step = step
	// next: the keys of the batch after cur, drawn while cur was pulled.
	next, err := m.NextBatch()
	ended := errors.Is(err, model.ErrEndOfData)
	if err != nil && !ended {
		return fmt.Errorf("step %d: next batch: %w", step, err)
	}
	grads := model.NewParams(m.Variables())
	rows := make([][]float32, len(tables))
	rowGrads := make([][]float32, len(tables))
	pushed := make([]client.Rows, len(tables))
	for i := 1; step < cfg.TrainSteps; i ^= 1 {
		t0 := time.Now()
		if next == nil && !ended {
			// Not drawn during the step before, which looked like the
			// last (see below).
			next, err = m.NextBatch()
			ended = errors.Is(err, model.ErrEndOfData)
			if err != nil && !ended {
				return fmt.Errorf("step %d: next batch: %w", step, err)
			}
		}
		for t := range tables {
			rows[t] = cur[t].Values
			rowGrads[t] = zeroed(rowGrads[t], len(cur[t].Values))
		}
		// cur is the batch before the one drawn last, unless the data
		// ended: then it is the last one drawn.
		gradients := m.PrevSparseGradients
		if ended {
			gradients = m.SparseGradients
		}
		if st.loss, err = gradients(params, grads, rows, rowGrads); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		for t, tb := range tables {
			pushed[t] = client.Rows{Table: tb.Name, Keys: cur[t].Keys, Values: rowGrads[t]}
		}
		var nextRows []client.Rows // none after the last batch: only the push and the dense pull
		if !ended {
			nextRows = rowsFor(i, next)
		}
		var minStep int64
		if cfg.Sync {
			minStep = step + 1
		}
		t1 := time.Now()
		st.lastCompute = t1.Sub(t0)
		st.compute += st.lastCompute
		call := p.Start(ctx, &client.Request{
			Push: true, Step: step, Grads: grads, SparseGrads: pushed,
			Pull: true, MinStep: minStep, Params: params, SparseParams: nextRows,
		})
		// The batch after next, unless this step should reach the goal:
		// then, as sparseLoop, the job draws (and pulls) one batch past
		// the last it trains, and looks no rows up for another.
		var after [][]uint64
		afterEnded := ended
		if !ended && step+1 < cfg.TrainSteps {
			after, err = m.NextBatch()
			afterEnded = errors.Is(err, model.ErrEndOfData)
			if err != nil && !afterEnded {
				p.Ahead(nil)
				p.settle()
				return fmt.Errorf("step %d: next batch: %w", step, err)
			}
		}
		if after == nil {
			p.Ahead(nil)
		} else {
			for t, tb := range tables {
				pushed[t] = client.Rows{Table: tb.Name, Keys: after[t]} // (pushed was copied by Start)
			}
			p.Ahead(pushed)
		}
		st.compute += time.Since(t1) // completeStep counts the wait after it
		if step, err = st.completeStep(ctx, cfg, m, params, nil, step, call, nil); err != nil {
			return err
		}
		if ended {
			endOfData(cfg, st)
			return nil
		}
		cur, next, ended = nextRows, after, afterEnded
	}
	return nil
}
