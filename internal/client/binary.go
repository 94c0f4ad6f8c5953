package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/wire"
)

// The data path (docs/WIRE.md): Pull, Push and PushPull as binary frames
// on plain TCP connections to each ps's one port, beside gRPC, which keeps
// Init, Status and Done and is the fallback. A call writes each ps's frame
// with one writev from the caller's own slices (gradients are not copied
// with one ps) and reads the reply straight into the caller's params and
// rows. Key sets seen before are named by a cache slot instead of being
// sent again (keyCache). The semantics are those of the gRPC path: the
// same checks on the ps, the same steps, drops and errors (as gRPC
// status errors with the same codes), the same step (stepOf) in sync mode.

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

// connPool holds the idle data connections to one ps.
type connPool struct {
	addr string
	dial func(ctx context.Context, addr string) (net.Conn, error) // tests: nil dials TCP
	// version is the data path version asked for: DataVersionIncremental
	// with IncrementalPull until the ps refuses it, then DataVersion.
	version atomic.Int32
	mu      sync.Mutex // guards idle and shut
	idle    []*dataConn
	shut    bool
}

// maxIdle is the most idle connections kept per ps: more than the calls a
// worker has in flight at once, ordinarily one or two.
const maxIdle = 4

// dataConn is one connection to a ps and the memory it reuses. Only the
// call holding it (taken from its pool) touches it.
type dataConn struct {
	nc       net.Conn
	br       *bufio.Reader
	frame    wire.Frame
	hdr      [wire.RepHeaderLen]byte
	body     wire.BodyReader
	deadline bool  // a deadline is set on nc
	broken   bool  // not to be used again (a cancellation may set its deadline)
	silent   error // the health check found the ps silent (probe.go)
	probe    connProbe
	// slot[s] is the uid of the key set the ps keeps in cache slot s (0:
	// none), used[s] when it was last named.
	slot    [wire.CacheSlots]uint64
	used    [wire.CacheSlots]uint64
	clock   uint64
	scratch []float32 // rows gathered for or scattered from this ps
	incr    bool      // the ps speaks incremental pulls on this connection
	inc     incrScratch
	dincr   bool // the ps speaks incremental dense pulls on this connection
	dense   denseAnswer
	sent    sent // what the request in flight holds (send, recv)
}

// helloTimeout bounds the wait for a ps's answer to the preface; a ps that
// does not speak the data path (an older one) does not answer.
const helloTimeout = 10 * time.Second

// errNoDataPath means the ps does not speak the data path.
var errNoDataPath = errors.New("the ps does not speak the data path")

func newDataPath(c *Client) *dataPath {
	dp := &dataPath{c: c}
	for _, a := range c.addrs {
		p := &connPool{addr: a, dial: c.opts.Dial}
		p.version.Store(wire.DataVersion)
		if c.opts.IncrementalPull {
			p.version.Store(wire.DataVersionDenseIncremental)
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

// get returns an idle connection to the ps, or dials one.
func (p *connPool) get(ctx context.Context) (*dataConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		d := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return d, nil
	}
	p.mu.Unlock()
	v := int(p.version.Load())
	d, err := dial(ctx, p.addr, p.dial, v)
	for errors.Is(err, errVersion) && v > wire.DataVersion {
		// An older ps: the version below (full dense pulls from a ps of
		// version 2, full pulls from one of version 1).
		v--
		p.version.Store(int32(v))
		d, err = dial(ctx, p.addr, p.dial, v)
	}
	return d, err
}

// errVersion: the ps refused the data path version asked for.
var errVersion = errors.New("version not spoken")

// put gives back a connection that is ready for the next request.
func (p *connPool) put(d *dataConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut || d.broken || len(p.idle) >= maxIdle {
		d.nc.Close()
		return
	}
	p.idle = append(p.idle, d)
}

func dial(ctx context.Context, addr string, with func(context.Context, string) (net.Conn, error), version int) (*dataConn, error) {
	if with == nil {
		var dl net.Dialer
		with = func(ctx context.Context, addr string) (net.Conn, error) { return dl.DialContext(ctx, "tcp", addr) }
	}
	nc, err := with(ctx, addr)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	deadline := time.Now().Add(helloTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = nc.SetDeadline(deadline)
	d := &dataConn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), deadline: true}
	if _, err := nc.Write(wire.PrefaceVersion(version)); err != nil {
		nc.Close()
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	var hb [wire.HelloLen]byte
	if _, err := io.ReadFull(d.br, hb[:]); err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, fmt.Errorf("%w (no answer to its preface: %v)", errNoDataPath, err)
	}
	h, err := wire.ParseHello(hb[:])
	if err == nil && h.Status == wire.HelloBadVersion && version != wire.DataVersion {
		nc.Close()
		return nil, errVersion
	}
	if err == nil && (h.Status != wire.HelloOK || h.Version != version || h.Slots < wire.CacheSlots || h.MaxCachedKeys < wire.MaxCachedKeys) {
		err = fmt.Errorf("it answered version %d, status %d, %d key slots of %d keys", h.Version, h.Status, h.Slots, h.MaxCachedKeys)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: %v", errNoDataPath, err)
	}
	d.incr = version >= wire.DataVersionIncremental
	d.dincr = version >= wire.DataVersionDenseIncremental
	return d, nil
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
	n := len(dp.ps)
	perr := make([]error, n)
	for i := range n {
		perr[i] = dp.begin(ctx, cs, i, req.Push, req.Pull, req.MinStep)
	}
	call.finish = func() {
		defer close(call.done)
		defer dp.release(cs)
		for i := range n {
			if perr[i] == nil {
				cs.steps[i], cs.dropped[i], perr[i] = dp.end(ctx, cs, i, req.Push, req.Pull, req.MinStep)
			}
			if perr[i] != nil {
				perr[i] = fmt.Errorf("ps %d at %s: %w", i, dp.ps[i].addr, dp.c.classify(i, perr[i]))
			}
		}
		dp.landed(cs, call, perr)
	}
	return true
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

// roundTrip sends ps i its part of the call and reads the answer into the
// caller's params and rows. On an error that leaves the connection unusable
// it closes it and clears cs.conns[i].
func (dp *dataPath) roundTrip(ctx context.Context, cs *callState, i int, push, pull bool, minStep int64) (step int64, dropped bool, err error) {
	if err := dp.begin(ctx, cs, i, push, pull, minStep); err != nil {
		return 0, false, err
	}
	return dp.end(ctx, cs, i, push, pull, minStep)
}

// begin is the first half of roundTrip: it sends ps i its part of the
// call; end reads the answer.
func (dp *dataPath) begin(ctx context.Context, cs *callState, i int, push, pull bool, minStep int64) error {
	d := cs.conns[i]
	if d == nil {
		// An earlier round trip of this call broke the connection.
		var err error
		if d, err = dp.ps[i].get(ctx); err != nil {
			return err
		}
		cs.conns[i] = d
	}
	if err := dp.send(ctx, d, cs, i, push, pull, minStep, dp.c.opts.NoKeyCache); err != nil {
		return dp.broke(ctx, cs, i, err)
	}
	return nil
}

// end reads ps i's answer to what begin sent; after a key cache miss it
// sends the request again with its keys.
func (dp *dataPath) end(ctx context.Context, cs *callState, i int, push, pull bool, minStep int64) (step int64, dropped bool, err error) {
	d := cs.conns[i]
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := dp.send(ctx, d, cs, i, push, pull, minStep, true); err != nil {
				return 0, false, dp.broke(ctx, cs, i, err)
			}
		}
		step, dropped, err = dp.recv(d, cs, i, pull)
		var re *replyError
		if err == nil || errors.As(err, &re) {
			// The connection is in step: an error reply came whole. The ps
			// keeps nothing the request asked it to keep.
			if err != nil {
				d.slot = [wire.CacheSlots]uint64{}
				if attempt == 0 && re.cacheMiss() {
					continue
				}
				err = re.err
			}
			return step, dropped, err
		}
		return 0, false, dp.broke(ctx, cs, i, err)
	}
}

// broke closes ps i's connection after err left it unusable, clears
// cs.conns[i], and returns the call's error.
func (dp *dataPath) broke(ctx context.Context, cs *callState, i int, err error) error {
	d := cs.conns[i]
	d.nc.Close()
	cs.conns[i] = nil
	if d.silent != nil {
		return d.silent
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The connection's deadlines come from ctx: it is done, or
		// about to be (its timer may not have fired yet).
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	var fe *wire.FrameError
	var le *LayoutError
	switch {
	case errors.As(err, &le):
	case ctx.Err() != nil:
		err = status.FromContextError(ctx.Err()).Err()
	case errors.As(err, &fe):
		err = status.Error(codes.Internal, err.Error())
	case !isStatus(err):
		err = status.Error(codes.Unavailable, err.Error())
	}
	return err
}

func isStatus(err error) bool {
	_, ok := status.FromError(err)
	return ok
}

// replyError is an error reply from the ps: the call failed, the
// connection is fine.
type replyError struct{ err error }

func (e *replyError) Error() string { return e.err.Error() }

// cacheMiss reports whether the ps did not have a key set the request
// named (it changed nothing; the request can be sent again with the keys).
func (e *replyError) cacheMiss() bool {
	st := status.Convert(e.err)
	return st.Code() == codes.Aborted && strings.Contains(st.Message(), "key cache miss")
}

// sent is what a request written on a data connection holds until its
// reply is read (recv) or the write failed: the stores of incremental
// pulls locked, the watch of the call's context and the health check.
type sent struct {
	held      *rowStore   // locked: an incremental pull of rows
	ds        *denseStore // locked: an incremental pull of dense values
	heldSince uint64      // ds's version before the pull
	stop      func() bool // stops the context's watch, if any
	armed     bool        // the health check is armed
}

// settle gives back what the request in flight held (see sent).
func (d *dataConn) settle() {
	s := &d.sent
	if s.armed && d.probe.disarm() {
		d.broken = true
	}
	if s.stop != nil && !s.stop() {
		d.broken = true // its deadline may be set in the past any time now
	}
	if s.ds != nil {
		s.ds.mu.Unlock()
	}
	if s.held != nil {
		s.held.mu.Unlock()
	}
	*s = sent{}
}

// send writes one request to ps i; recv reads its reply. noCache sends
// every key set's keys and keeps none. On an error the connection holds
// nothing (settle has run).
func (dp *dataPath) send(ctx context.Context, d *dataConn, cs *callState, i int, push, pull bool, minStep int64, noCache bool) (err error) {
	defer func() {
		if err != nil {
			d.settle()
		}
	}()
	c, req := dp.c, cs.req
	op := wire.OpPull
	if push {
		op = wire.OpPush
		if pull {
			op = wire.OpPushPull
		}
	}
	d.clock++
	var named uint32 // slots named by this request
	// slotFor says how to send key set e: by its slot if the ps keeps it,
	// else its keys, kept in the least recently named slot.
	slotFor := func(e *keyEntry) (wire.KeyMode, int) {
		if noCache || e.uid == 0 {
			return wire.KeysInline, wire.NoSlot
		}
		for s, u := range d.slot {
			if u == e.uid {
				named |= 1 << s
				d.used[s] = d.clock
				return wire.KeysCached, s
			}
		}
		best := -1
		for s := range d.slot {
			if named&(1<<s) == 0 && (best < 0 || d.used[s] < d.used[best]) {
				best = s
			}
		}
		if best < 0 {
			// Every slot is named by this request already (a request
			// of more than CacheSlots key sets): send the keys inline.
			return wire.KeysInline, wire.NoSlot
		}
		named |= 1 << best
		d.slot[best], d.used[best] = e.uid, d.clock
		return wire.KeysInline, best
	}

	// Scratch for the rows gathered for this ps (several ps only), and,
	// after the request is written, for the rows it answers.
	n := len(dp.ps)
	if n > 1 {
		need := 0
		if push {
			for j, e := range cs.push {
				need += len(e.perPS[i]) * c.tableDim[req.SparseGrads[j].Table]
			}
		}
		if pull {
			for j, e := range cs.pull {
				need = max(need, len(e.perPS[i])*c.tableDim[req.SparseParams[j].Table])
			}
		}
		if cap(d.scratch) < need {
			d.scratch = make([]float32, need)
		}
	}

	f := &d.frame
	f.Reset(wire.ReqHeaderLen)
	if push {
		if req.Grads != nil {
			for _, p := range c.byPS[i] {
				f.Dense(p.Name, req.Grads[c.varOf[p.Name]][p.Offset:p.Offset+p.Len])
			}
		}
		off := 0
		for j, r := range req.SparseGrads {
			e := cs.push[j]
			keys, vals := e.keysOf(i), r.Values
			if n > 1 {
				dim := c.tableDim[r.Table]
				vals = d.scratch[off : off+len(keys)*dim]
				for k, at := range e.pos[i] {
					copy(vals[k*dim:(k+1)*dim], r.Values[int(at)*dim:(int(at)+1)*dim])
				}
				off += len(vals)
			}
			mode, arg := slotFor(e)
			f.SparsePush(r.Table, mode, arg, len(keys), keys, vals)
		}
	}
	incr := pull && d.incr && dp.held != nil && len(req.SparseParams) > 0
	var held *rowStore
	if incr {
		held = dp.held[i]
		// One incremental pull of this ps at a time: the rows it keeps
		// change only with whole answers.
		incr = held.want()
	}
	if incr {
		d.sent.held = held
		d.inc.ask(held, cs, i, c.tableDim)
	}
	if pull {
		for j, r := range req.SparseParams {
			e := cs.pull[j]
			keys := e.keysOf(i)
			mode, arg := wire.KeysAsPush, cs.asPush[j]
			if !push || arg < 0 {
				mode, arg = slotFor(e)
			}
			if incr {
				f.SparsePullIncr(r.Table, mode, arg, len(keys), keys, held.inc, d.inc.since[j], d.inc.lack[j])
			} else {
				f.SparsePull(r.Table, mode, arg, len(keys), keys)
			}
		}
	}
	dincr := pull && d.dincr && dp.dense != nil && req.Params != nil && len(c.byPS[i]) > 0
	var ds *denseStore
	if dincr {
		ds = dp.dense[i]
		dincr = ds.want()
	}
	if dincr {
		d.sent.ds = ds
		f.DenseHeld(wire.DenseHeld{Incarnation: ds.inc, Since: ds.since, Blocks: denseBlocks(c.byPS[i])})
		// Until a whole answer is in, the values kept are of no version.
		d.sent.heldSince = ds.since
		ds.since = 0
	}
	f.Request(wire.ReqHeader{Op: op, PullDense: pull && req.Params != nil, Incremental: incr, DenseIncremental: dincr, Worker: int32(c.opts.Worker), Step: req.Step, MinStep: minStep})

	if err := d.setDeadline(ctx); err != nil {
		return err
	}
	if ctx.Done() != nil {
		d.sent.stop = context.AfterFunc(ctx, func() { _ = d.nc.SetDeadline(time.Unix(1, 0)) })
	}
	d.probe.arm(dp.c, i, d)
	d.sent.armed = true
	_, err = f.WriteTo(d.nc)
	return err
}

// recv reads the reply of the request send wrote to ps i into the
// caller's params and rows.
func (dp *dataPath) recv(d *dataConn, cs *callState, i int, pull bool) (int64, bool, error) {
	defer d.settle()
	c, req := dp.c, cs.req
	n := len(dp.ps)
	incr, held := d.sent.held != nil, d.sent.held
	dincr, ds, heldSince := d.sent.ds != nil, d.sent.ds, d.sent.heldSince
	if _, err := io.ReadFull(d.br, d.hdr[:]); err != nil {
		return 0, false, err
	}
	h, err := wire.ParseRepHeader(d.hdr[:])
	if err != nil {
		return 0, false, err
	}
	body := &d.body
	*body = wire.BodyReader{R: d.br, Left: h.Body}
	if h.Err {
		code, msg, err := wire.ReadErrorBody(body)
		if err != nil {
			return 0, false, err
		}
		return 0, false, &replyError{status.Error(codes.Code(code), msg)}
	}
	if !pull {
		if h.Dense != 0 || h.Sparse != 0 || h.Body != 0 {
			return 0, false, fmt.Errorf("data path: the ps answered a push with %d bytes of values", h.Body)
		}
		return h.Step, h.Dropped, dp.incarnation(i, h)
	}
	wantDense := 0
	if req.Params != nil {
		wantDense = len(c.byPS[i])
	}
	if h.Dense != wantDense || h.Sparse != len(req.SparseParams) {
		return 0, false, dp.layoutError(i, body, h.Dense, h.Sparse,
			fmt.Sprintf("the ps answered %d variables and %d tables, want %d and %d", h.Dense, h.Sparse, wantDense, len(req.SparseParams)))
	}
	if dincr {
		if err := d.dense.head(body, denseBlocks(c.byPS[i])); err != nil {
			if errors.Is(err, errBlockCount) {
				return 0, false, dp.layoutError(i, body, h.Dense, h.Sparse, err.Error())
			}
			return 0, false, err
		}
		if (heldSince == 0 || h.Incarnation != ds.inc) && d.dense.sent != denseBlocks(c.byPS[i]) {
			return 0, false, fmt.Errorf("data path: the ps sent %d of %d dense blocks, the worker holds none of them", d.dense.sent, denseBlocks(c.byPS[i]))
		}
	}
	var name []byte
	for range h.Dense {
		if name, err = body.Name(name[:0], "variable"); err != nil {
			return 0, false, err
		}
		cnt, err := body.Uint32("value count")
		if err != nil {
			return 0, false, err
		}
		p, ok := c.part[string(name)]
		want := p.Len
		if dincr && ok && p.PS == i {
			want = d.dense.count(p.Len)
		}
		if !ok || p.PS != i || cnt != int64(want) {
			detail := fmt.Sprintf("ps sent unknown variable %q", name)
			if ok && p.PS == i {
				detail = fmt.Sprintf("ps sent %d bytes for %q, want %d", 4*cnt, name, 4*want)
			}
			return 0, false, &LayoutError{PS: i, Addr: dp.ps[i].addr, Detail: detail,
				Have: fmt.Sprintf("%d variables and %d tables, among them %s[%d]", h.Dense, h.Sparse, name, cnt), Want: c.layoutOf(i)}
		}
		dst := req.Params[c.varOf[p.Name]][p.Offset : p.Offset+p.Len]
		if dincr {
			if err := d.dense.read(ds, p.Name, dst, body); err != nil {
				return 0, false, err
			}
			continue
		}
		if err := body.FloatsInto(dst, "values"); err != nil {
			return 0, false, err
		}
	}
	if dincr {
		// Every block now holds the answer's version: a block not sent
		// was unchanged up to it.
		ds.inc, ds.since = h.Incarnation, d.dense.ver
		ds.tally(denseBlocks(c.byPS[i]), d.dense.sent)
	}
	if incr {
		if err := d.inc.answer(held, cs, i, c.tableDim, h.Incarnation, body); err != nil {
			return 0, false, err
		}
	}
	for j, r := range req.SparseParams {
		if incr {
			break
		}
		e := cs.pull[j]
		dim := c.tableDim[r.Table]
		cnt, err := body.Uint32("value count")
		if err != nil {
			return 0, false, err
		}
		want := len(e.keysOf(i)) * dim
		if cnt != int64(want) {
			return 0, false, fmt.Errorf("table %q: ps answered %d bytes, want %d", r.Table, 4*cnt, 4*want)
		}
		if n == 1 {
			if err := body.FloatsInto(r.Values, "rows"); err != nil {
				return 0, false, err
			}
			continue
		}
		vals := d.scratch[:want]
		if err := body.FloatsInto(vals, "rows"); err != nil {
			return 0, false, err
		}
		for k, at := range e.pos[i] {
			copy(r.Values[int(at)*dim:(int(at)+1)*dim], vals[k*dim:(k+1)*dim])
		}
	}
	if body.Left != 0 {
		return 0, false, fmt.Errorf("data path: %d bytes after the last section of the reply", body.Left)
	}
	return h.Step, h.Dropped, dp.incarnation(i, h)
}

// layoutError describes the variables a reply of ps i holds (dense of
// them, then sparse tables), read from its body, against the model's.
func (dp *dataPath) layoutError(i int, body *wire.BodyReader, dense, sparse int, detail string) error {
	var have []string
	var name, skip []byte
	var err error
	// The first few, reading at most a few MiB of values past: the
	// connection is closed after.
	for range min(dense, 8) {
		if name, err = body.Name(name[:0], "variable"); err != nil {
			break
		}
		cnt, err := body.Uint32("value count")
		if err != nil || cnt > body.Left/4 {
			break
		}
		have = append(have, fmt.Sprintf("%s[%d]", name, cnt))
		if 4*cnt > 4<<20 {
			break
		}
		if skip, err = body.Bytes(skip[:0], int(4*cnt), "values"); err != nil {
			break
		}
	}
	if len(have) < dense {
		have = append(have, "...")
	}
	return &LayoutError{PS: i, Addr: dp.ps[i].addr, Detail: detail, Have: fmt.Sprintf("%d variables %v and %d tables", dense, have, sparse), Want: dp.c.layoutOf(i)}
}

// incarnation checks a whole, well-formed reply's incarnation; a changed
// one comes back as a reply error, so the connection is kept.
func (dp *dataPath) incarnation(i int, h wire.RepHeader) error {
	if err := dp.c.checkIncarnation(i, h.Incarnation); err != nil {
		return &replyError{err}
	}
	return nil
}

// setDeadline gives the connection ctx's deadline, or none.
func (d *dataConn) setDeadline(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	dl, ok := ctx.Deadline()
	if !ok && !d.deadline {
		return nil
	}
	d.deadline = ok
	return d.nc.SetDeadline(dl)
}

// keyCache remembers the key sets of recent calls, so that a call with the
// same keys as an earlier one (compared in full) can name the ps's copy of
// them, a cache slot on the connection, instead of sending them again; with
// several ps it also keeps each set's split into the keys of each ps.
//
// Concurrency: mu guards the entries' list, clock and references; an
// entry's keys and split never change while it is referenced.
type keyCache struct {
	mu      sync.Mutex
	entries []*keyEntry
	clock   uint64
	nextUID uint64
}

// keyEntry is one key set: a copy of the keys, and with several ps the
// keys of each ps and their positions in the set.
type keyEntry struct {
	uid   uint64 // 0: not kept (too large), never in a slot
	table string
	keys  []uint64
	perPS [][]uint64
	pos   [][]int32
	refs  int
	used  uint64
}

// maxKeySets is the number of key sets the client remembers.
const maxKeySets = wire.CacheSlots

// keysOf returns the keys of the set that ps i owns.
func (e *keyEntry) keysOf(i int) []uint64 {
	if e.perPS == nil {
		return e.keys
	}
	return e.perPS[i]
}

// get returns the entry of keys of table, referenced until release: a
// remembered one with the same keys, or a new one.
func (kc *keyCache) get(table string, keys []uint64, numPS int) *keyEntry {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	kc.clock++
	for _, e := range kc.entries {
		if e.table == table && len(e.keys) == len(keys) && sameKeys(e.keys, keys) {
			e.refs++
			e.used = kc.clock
			return e
		}
	}
	if len(keys) > wire.MaxCachedKeys {
		// Too many to keep: sent in full every time, split afresh.
		e := &keyEntry{table: table, keys: keys}
		e.split(numPS)
		return e
	}
	// Reuse the memory of the least recently used entry not in use.
	var e *keyEntry
	if len(kc.entries) < maxKeySets {
		e = &keyEntry{}
		kc.entries = append(kc.entries, e)
	} else {
		for _, x := range kc.entries {
			if x.refs == 0 && (e == nil || x.used < e.used) {
				e = x
			}
		}
		if e == nil { // all in use: one more, dropped when released
			e = &keyEntry{}
			kc.entries = append(kc.entries, e)
		}
	}
	kc.nextUID++
	e.uid, e.table, e.refs, e.used = kc.nextUID, table, 1, kc.clock
	e.keys = append(e.keys[:0], keys...)
	e.split(numPS)
	return e
}

// sameKeys compares two key sets of the same length, cheap ends first.
func sameKeys(a, b []uint64) bool {
	if len(a) == 0 {
		return true
	}
	if a[0] != b[0] || a[len(a)-1] != b[len(b)-1] {
		return false
	}
	return string(wire.Uint64Bytes(a)) == string(wire.Uint64Bytes(b))
}

// split fills perPS and pos for numPS > 1, reusing their memory.
func (e *keyEntry) split(numPS int) {
	if numPS == 1 {
		e.perPS, e.pos = nil, nil
		return
	}
	if len(e.perPS) != numPS {
		e.perPS, e.pos = make([][]uint64, numPS), make([][]int32, numPS)
	}
	for i := range numPS {
		e.perPS[i], e.pos[i] = e.perPS[i][:0], e.pos[i][:0]
	}
	for at, k := range e.keys {
		o := placement.KeyShard(k, numPS)
		e.perPS[o] = append(e.perPS[o], k)
		e.pos[o] = append(e.pos[o], int32(at))
	}
}

// release drops the references of a call; entries beyond the cache's size
// go once unused.
func (kc *keyCache) release(es []*keyEntry) {
	if len(es) == 0 {
		return
	}
	kc.mu.Lock()
	defer kc.mu.Unlock()
	for _, e := range es {
		if e.uid != 0 {
			e.refs--
		}
	}
	for len(kc.entries) > maxKeySets {
		i := -1
		for j, x := range kc.entries {
			if x.refs == 0 && (i < 0 || x.used < kc.entries[i].used) {
				i = j
			}
		}
		if i < 0 {
			return
		}
		kc.entries = append(kc.entries[:i], kc.entries[i+1:]...)
	}
}
