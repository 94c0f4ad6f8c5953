package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/paramserv/paramserv/internal/wire"
)

// The data path (docs/WIRE.md): Pull, Push and PushPull as binary frames
// on plain TCP connections to each ps's one port, beside gRPC, which keeps
// Init, Status and Done and is the fallback. A call writes each ps's frame
// with one writev from the caller's own slices (gradients are not copied
// with one ps) and reads the reply straight into the caller's params and
// rows. Key sets seen before are named by a cache slot instead of being
// sent again (keyCache). The semantics are those of the gRPC path: the
// same checks on the ps, the same steps, drops and errors (of the same
// client kinds: an error reply carries the shard's error kind, see
// psError), the same step (stepOf) in sync mode.
//
// The files: datapath.go runs a call on every ps; pool.go keeps the
// connections, handshake.go opens them; roundtrip.go is one ps's part of
// a call, send.go writes its request and recv.go reads its reply;
// keycache.go remembers key sets. None of them speaks gRPC (grpc.go).

// dataPath is the client's side of the data path.
//
// Concurrency: a connection is used by one call at a time: a call takes
// one per ps from the pool (or dials) and puts it back when it has landed,
// so buffers a connection keeps are never shared by calls in flight. off
// is set once, when a ps turns out not to speak the data path.
type dataPath struct {
	c    *Client
	off  atomic.Bool
	ps   []*connPool
	keys keyCache
	held []*rowStore // per ps, the rows kept for incremental pulls; nil without IncrementalPull
	// dense is per ps the dense values kept for incremental pulls; nil
	// without IncrementalPull.
	dense []*denseStore
}

func newDataPath(c *Client) *dataPath {
	dp := &dataPath{c: c}
	for _, a := range c.addrs {
		p := &connPool{addr: a, dial: c.opts.Dial, incremental: c.opts.IncrementalPull, threadReads: c.opts.ThreadReads}
		p.version.Store(wire.DataVersionIncarnation)
		if c.opts.IncrementalPull {
			dp.held = append(dp.held, newRowStore())
			dp.dense = append(dp.dense, newDenseStore())
		}
		dp.ps = append(dp.ps, p)
	}
	return dp
}

func (dp *dataPath) close() {
	for _, p := range dp.ps {
		p.mu.Lock()
		for _, d := range p.idle {
			d.nc.Close()
		}
		p.idle, p.shut = nil, true
		p.mu.Unlock()
	}
}

// dataDo runs req, whose dense parts are checked, on the data path and
// returns its call, or nil if the data path is off (the caller uses gRPC). With wait it runs on the calling
// goroutine and returns once the call has landed.
func (c *Client) dataDo(ctx context.Context, req *Request, wait bool) *Call {
	dp := c.dp
	if dp == nil || dp.off.Load() {
		return nil
	}
	if err := c.checkRows(req.SparseGrads); err != nil {
		return failed(err)
	}
	if err := c.checkRows(req.SparseParams); err != nil {
		return failed(err)
	}
	call := newCall()
	run := func() {
		if !dp.run(ctx, req, call) {
			// A ps does not speak the data path: the call goes by gRPC.
			inner := c.grpcDo(ctx, req)
			<-inner.Done
			call.Err, call.Step, call.Dropped = inner.Err, inner.Step, inner.Dropped
		}
		close(call.done)
	}
	if wait {
		run()
	} else {
		go run()
	}
	return call
}

// checkRows checks rows as splitRows does.
func (c *Client) checkRows(rows []Rows) error {
	for _, r := range rows {
		dim, ok := c.tableDim[r.Table]
		if !ok {
			return fmt.Errorf("client: unknown table %q", r.Table)
		}
		if len(r.Values) != len(r.Keys)*dim {
			return fmt.Errorf("client: table %q: %d keys of dim %d need %d values, got %d", r.Table, len(r.Keys), dim, len(r.Keys)*dim, len(r.Values))
		}
	}
	return nil
}

// callState is what one call's per-ps round trips share.
type callState struct {
	req     *Request
	push    []*keyEntry // key set of each req.SparseGrads
	pull    []*keyEntry // key set of each req.SparseParams
	asPush  []int       // push section with the same key set as pull j, or -1
	conns   []*dataConn
	steps   []int64
	dropped []bool
}

// run does the call on every ps in parallel; false means a ps does not
// speak the data path (nothing was sent; the data path is now off).
func (dp *dataPath) run(ctx context.Context, req *Request, call *Call) bool {
	cs, ok := dp.prepare(ctx, req, call)
	if cs == nil {
		return ok
	}
	defer dp.release(cs)
	n := len(dp.ps)
	if n > 1 && dp.c.opts.ThreadReads && small(req) {
		// On the caller's thread (Options.ThreadReads): every ps's part
		// sent, then the answers read in turn, as Send and Wait do.
		perr := dp.beginAll(ctx, cs, req)
		dp.endAll(ctx, cs, req, perr)
		dp.landed(cs, call, perr)
		return true
	}
	// Once one ps fails, the round trips to the others are cancelled (see
	// eachCtx) and their errors left out.
	pctx, cancel := ctx, context.CancelCauseFunc(func(error) {})
	if n > 1 {
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
	}
	perr := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		f := func() {
			var err error
			cs.steps[i], cs.dropped[i], err = dp.roundTrip(ctx, cs, i, req.Push, req.Pull, req.MinStep)
			if err == nil || (pctx.Err() == nil && errors.Is(context.Cause(ctx), errSibling)) {
				return
			}
			perr[i] = fmt.Errorf("ps %d at %s: %w", i, dp.ps[i].addr, dp.c.classify(i, err))
			cancel(errSibling)
		}
		if i == n-1 {
			f()
		} else {
			wg.Go(f)
		}
	}
	wg.Wait()
	dp.landed(cs, call, perr)
	return true
}

// start is run without waiting for the answers: it sends every ps its part
// of the call, one after the other, on the calling goroutine, and leaves
// reading the answers to call.Wait (finish), so no other goroutine takes
// part in the call. False means a ps does not speak the data path
// (nothing was sent; the data path is now off).
func (dp *dataPath) start(ctx context.Context, req *Request, call *Call) bool {
	cs, ok := dp.prepare(ctx, req, call)
	if cs == nil {
		if ok {
			close(call.done)
		}
		return ok
	}
	perr := dp.beginAll(ctx, cs, req)
	call.finish = func() {
		defer close(call.done)
		defer dp.release(cs)
		dp.endAll(ctx, cs, req, perr)
		dp.landed(cs, call, perr)
	}
	return true
}

// beginAll sends every ps its part of req, one after the other, on the
// calling goroutine; it returns each ps's error in sending.
func (dp *dataPath) beginAll(ctx context.Context, cs *callState, req *Request) []error {
	perr := make([]error, len(dp.ps))
	for i := range perr {
		perr[i] = dp.begin(ctx, cs, i, req.Push, req.Pull, req.MinStep)
	}
	return perr
}

// endAll reads the answers of the ps that beginAll sent to, in turn, on
// the calling goroutine, and names the ps in each error of perr.
func (dp *dataPath) endAll(ctx context.Context, cs *callState, req *Request, perr []error) {
	for i := range perr {
		if perr[i] == nil {
			cs.steps[i], cs.dropped[i], perr[i] = dp.end(ctx, cs, i, req.Push, req.Pull, req.MinStep)
		}
		if perr[i] != nil {
			perr[i] = fmt.Errorf("ps %d at %s: %w", i, dp.ps[i].addr, dp.c.classify(i, perr[i]))
		}
	}
}

// prepare takes a connection to every ps and the key sets of req for a
// call. It returns nil, false if a ps does not speak the data path
// (nothing was sent; the data path is now off), and nil, true with
// call.Err set if a ps could not be reached.
func (dp *dataPath) prepare(ctx context.Context, req *Request, call *Call) (*callState, bool) {
	n := len(dp.ps)
	cs := &callState{req: req, conns: make([]*dataConn, n), steps: make([]int64, n), dropped: make([]bool, n)}
	// Connections first: a ps that does not speak the data path turns it
	// off before anything is sent.
	var errs []error
	for i, p := range dp.ps {
		d, err := p.get(ctx)
		if errors.Is(err, errNoDataPath) {
			if dp.off.CompareAndSwap(false, true) {
				dp.c.opts.Logf("ps %d at %s: %v; using gRPC for pushes and pulls", i, p.addr, err)
			}
			for _, d := range cs.conns {
				if d != nil {
					d.nc.Close()
				}
			}
			return nil, false
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("ps %d at %s: %w", i, p.addr, dp.c.classify(i, err)))
		}
		cs.conns[i] = d
	}
	if len(errs) > 0 {
		for i, d := range cs.conns {
			if d != nil {
				dp.ps[i].put(d)
			}
		}
		call.Err = errors.Join(errs...)
		return nil, true
	}
	if req.Push {
		for _, r := range req.SparseGrads {
			cs.push = append(cs.push, dp.keys.get(r.Table, r.Keys, n))
		}
	}
	if req.Pull {
		for _, r := range req.SparseParams {
			e := dp.keys.get(r.Table, r.Keys, n)
			cs.pull = append(cs.pull, e)
			as := -1
			for j, pe := range cs.push {
				if pe == e {
					as = j
					break
				}
			}
			cs.asPush = append(cs.asPush, as)
		}
	}
	return cs, true
}

// release drops the key sets a call referenced.
func (dp *dataPath) release(cs *callState) {
	dp.keys.release(cs.push)
	dp.keys.release(cs.pull)
}

// landed sets the call's outcome from the round trips to every ps (perr:
// their errors) and gives back the connections.
func (dp *dataPath) landed(cs *callState, call *Call, perr []error) {
	call.Err = errors.Join(perr...)
	for _, d := range cs.dropped {
		call.Dropped = call.Dropped || d
	}
	call.Step = cs.steps[0]
	if call.Err == nil && cs.req.Pull {
		call.Step = dp.c.stepOf(cs.steps)
	}
	for i, d := range cs.conns {
		if d != nil {
			dp.ps[i].put(d)
		}
	}
}
