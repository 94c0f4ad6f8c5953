package client

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Call is a Pull, Push or PushPull in flight. Done is closed when it has
// landed; then Err, Step and Dropped are set and may be read. A call made
// by Send lands only in Wait.
type Call struct {
	Done <-chan struct{}
	// Err is nil on success; otherwise it names each ps that failed.
	Err error
	// Step is the global step the ps reported: after a pull, the step of
	// the values read; after a push, the step after it.
	Step int64
	// Dropped reports that a push was not applied (stale or duplicate) on
	// at least one ps.
	Dropped bool

	done chan struct{}
	// finish reads the answers of a call made by Send; once runs it.
	finish func()
	once   sync.Once
}

func newCall() *Call {
	d := make(chan struct{})
	return &Call{Done: d, done: d}
}

// Wait blocks until the call has landed and returns its error. A call
// made by Send is landed here: its answers are read on the goroutine that
// calls Wait.
func (c *Call) Wait() error {
	if c.finish != nil {
		c.once.Do(c.finish)
	}
	<-c.Done
	return c.Err
}

// Deferred reports whether the call was made by Send and lands only in
// Wait.
func (c *Call) Deferred() bool { return c.finish != nil }

// Pull reads every variable into params once the global step reaches
// minStep (0: at once), and returns the step of the values read.
func (c *Client) Pull(ctx context.Context, minStep int64, params model.Params) (int64, error) {
	call := c.PullAsync(ctx, minStep, params)
	err := call.Wait()
	return call.Step, err
}

// Push sends grads computed at global step step. It reports the global step
// after the push and whether it was dropped as stale.
func (c *Client) Push(ctx context.Context, step int64, grads model.Params) (newStep int64, dropped bool, err error) {
	call := c.PushAsync(ctx, step, grads)
	err = call.Wait()
	return call.Step, call.Dropped, err
}

// PushPull pushes grads computed at step, then reads every variable into
// params once the global step reaches minStep, in one round trip per ps.
func (c *Client) PushPull(ctx context.Context, step int64, grads model.Params, minStep int64, params model.Params) (newStep int64, dropped bool, err error) {
	call := c.PushPullAsync(ctx, step, grads, minStep, params)
	err = call.Wait()
	return call.Step, call.Dropped, err
}

// PullAsync is Pull without waiting.
func (c *Client) PullAsync(ctx context.Context, minStep int64, params model.Params) *Call {
	return c.DoAsync(ctx, &Request{Pull: true, MinStep: minStep, Params: params})
}

// PushAsync is Push without waiting.
func (c *Client) PushAsync(ctx context.Context, step int64, grads model.Params) *Call {
	return c.DoAsync(ctx, &Request{Push: true, Step: step, Grads: grads})
}

// PushPullAsync is PushPull without waiting.
func (c *Client) PushPullAsync(ctx context.Context, step int64, grads model.Params, minStep int64, params model.Params) *Call {
	return c.DoAsync(ctx, &Request{Push: true, Step: step, Grads: grads, Pull: true, MinStep: minStep, Params: params})
}

// Rows are rows of a sparse table: Values holds len(Keys)*dim floats, row
// i for Keys[i]. Keys must be distinct. In a push Values are gradients; in a
// pull they receive the rows.
type Rows struct {
	Table  string
	Keys   []uint64
	Values []float32
}

// Request is one round trip to every ps: a push, a pull, or both (the push
// is applied first). Dense variables take part when Grads (push) or Params
// (pull) is non-nil; sparse rows when listed.
type Request struct {
	Push        bool
	Step        int64        // the global step the gradients were computed at
	Grads       model.Params // dense gradients, or nil
	SparseGrads []Rows

	Pull         bool
	MinStep      int64        // answer once the global step reaches this
	Params       model.Params // receives dense values, or nil
	SparseParams []Rows       // receive sparse rows
}

// Do sends req and waits for it.
func (c *Client) Do(ctx context.Context, req *Request) *Call {
	if err := c.checkDense(req); err != nil {
		return failed(err)
	}
	if call := c.dataDo(ctx, req, true); call != nil {
		return call
	}
	call := c.grpcDo(ctx, req)
	<-call.Done
	return call
}

// DoAsync sends req without waiting. The slices of req must not change
// until the call has landed.
func (c *Client) DoAsync(ctx context.Context, req *Request) *Call {
	if err := c.checkDense(req); err != nil {
		return failed(err)
	}
	if call := c.dataDo(ctx, req, false); call != nil {
		return call
	}
	return c.grpcDo(ctx, req)
}

// Send sends req and returns once it is written, without reading the
// answers: the call lands in its Wait, which reads them on the caller's
// goroutine. Between the two the ps applies the push and makes the answer
// while the caller goes on (a worker computes its next step), and no other
// goroutine takes part, so nothing is handed between goroutines or
// threads. The caller must call Wait; the call holds its connections until
// then (another call made meanwhile takes others). The slices of req must
// not change until the call has landed.
//
// Send is DoAsync, a call that lands by itself and that Wait waits for,
// when the request or its answer is larger than sendMaxBytes, with
// incremental pulls (Options.IncrementalPull), and when a ps does not speak
// the data path.
func (c *Client) Send(ctx context.Context, req *Request) *Call {
	dp := c.dp
	if dp == nil || dp.off.Load() || dp.held != nil || dp.dense != nil || !small(req) {
		return c.DoAsync(ctx, req)
	}
	if err := c.checkDense(req); err != nil {
		return failed(err)
	}
	if err := c.checkRows(req.SparseGrads); err != nil {
		return failed(err)
	}
	if err := c.checkRows(req.SparseParams); err != nil {
		return failed(err)
	}
	call := newCall()
	if !dp.start(ctx, req, call) {
		// A ps does not speak the data path: the call goes by gRPC.
		return c.grpcDo(ctx, req)
	}
	return call
}

// sendMaxBytes bounds the calls Send makes on the caller's goroutine:
// requests and answers this small fit in the sockets' buffers, so writing
// a request does not wait for the ps to read it, and the ps does not wait
// for the worker to read its answer (it is read only in Wait). Larger
// calls gain from being written and read beside the caller's work.
const sendMaxBytes = 64 << 10

// small reports whether req and its answer (all ps together) each hold at
// most sendMaxBytes of values and keys.
func small(req *Request) bool {
	var out, in int
	if req.Push {
		for _, g := range req.Grads {
			out += 4 * len(g)
		}
		for _, r := range req.SparseGrads {
			out += 8*len(r.Keys) + 4*len(r.Values)
		}
	}
	if req.Pull {
		for _, p := range req.Params {
			in += 4 * len(p)
		}
		for _, r := range req.SparseParams {
			out += 8 * len(r.Keys)
			in += 4 * len(r.Values)
		}
	}
	return out <= sendMaxBytes && in <= sendMaxBytes
}

// checkDense checks req's dense gradients and destinations, if any.
func (c *Client) checkDense(req *Request) error {
	if req.Grads != nil {
		if err := c.checkParams(req.Grads); err != nil {
			return err
		}
	}
	if req.Params != nil {
		return c.checkParams(req.Params)
	}
	return nil
}

// grpcDo sends req, whose dense parts are checked, by gRPC, without
// waiting.
func (c *Client) grpcDo(ctx context.Context, req *Request) *Call {
	pushRows, _, err := c.splitRows(req.SparseGrads, true)
	if err != nil {
		return failed(err)
	}
	pullRows, scatter, err := c.splitRows(req.SparseParams, false)
	if err != nil {
		return failed(err)
	}
	call := newCall()
	go func() {
		steps := make([]int64, len(c.ps))
		dropped := make([]bool, len(c.ps))
		call.Err = c.eachCtx(ctx, func(ctx context.Context, i int) (err error) {
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			pr := c.watch(i, cancel)
			defer func() {
				if silent := pr.stop(); silent != nil {
					err = silent
				}
			}()
			var push *pb.PushRequest
			var pull *pb.PullRequest
			if req.Push {
				push = &pb.PushRequest{Worker: int32(c.opts.Worker), Step: req.Step, Sparse: pushRows[i], Incarnation: c.seen(i)}
				if req.Grads != nil {
					push.Grads = c.denseTensors(i, req.Grads)
				}
			}
			if req.Pull {
				pull = &pb.PullRequest{Worker: int32(c.opts.Worker), MinStep: req.MinStep, NoDense: req.Params == nil, Sparse: pullRows[i]}
			}
			var resp *pb.PullResponse
			switch {
			case push != nil && pull != nil:
				r, err := c.callPushPull(ctx, i, &pb.PushPullRequest{Push: push, Pull: pull})
				if err != nil {
					return err
				}
				resp, dropped[i] = r, r.Push.GetDropped()
				if err := c.checkIncarnation(i, r.Incarnation); err != nil {
					return err
				}
			case push != nil:
				r, err := c.callPush(ctx, i, push)
				if err != nil {
					return err
				}
				steps[i], dropped[i] = r.GlobalStep, r.Dropped
				return c.checkIncarnation(i, r.Incarnation)
			case pull != nil:
				r, err := c.callPull(ctx, i, pull)
				if err != nil {
					return err
				}
				resp = r
				if err := c.checkIncarnation(i, r.Incarnation); err != nil {
					return err
				}
			default:
				return nil
			}
			steps[i] = resp.GlobalStep
			if req.Params != nil {
				if err := c.store(i, resp.Vars, req.Params); err != nil {
					return err
				}
			}
			return scatter(i, resp.Sparse)
		})
		for _, d := range dropped {
			call.Dropped = call.Dropped || d
		}
		call.Step = steps[0]
		if call.Err == nil && req.Pull {
			call.Step = c.stepOf(steps)
		}
		close(call.done)
	}()
	return call
}

func failed(err error) *Call {
	call := newCall()
	call.Err = err
	close(call.done)
	return call
}

// checkParams verifies that p holds every variable at its size.
func (c *Client) checkParams(p model.Params) error {
	for _, v := range c.plan.Vars {
		if got := len(p[v.Name]); got != v.Size() {
			return fmt.Errorf("client: %q has %d elements, want %d (shape %v)", v.Name, got, v.Size(), v.Shape)
		}
	}
	return nil
}

// denseTensors builds ps i's share of dense gradients. The bytes are views
// of grads: the caller must not change grads until the call has landed.
func (c *Client) denseTensors(i int, grads model.Params) []*pb.DenseTensor {
	out := make([]*pb.DenseTensor, 0, len(c.byPS[i]))
	for _, p := range c.byPS[i] {
		g := grads[c.varOf[p.Name]][p.Offset : p.Offset+p.Len]
		out = append(out, &pb.DenseTensor{Name: p.Name, Data: wire.Float32Bytes(g)})
	}
	return out
}

// store copies pulled parts into their places in params.
func (c *Client) store(ps int, vars []*pb.DenseTensor, params model.Params) error {
	if len(vars) != len(c.byPS[ps]) {
		return c.layoutError(ps, vars, fmt.Sprintf("the ps answered %d variables, want %d", len(vars), len(c.byPS[ps])))
	}
	for _, t := range vars {
		name, ok := c.varOf[t.Name]
		if !ok {
			return c.layoutError(ps, vars, fmt.Sprintf("ps sent unknown variable %q", t.Name))
		}
		p := c.part[t.Name]
		if len(t.Data) != 4*p.Len || p.PS != ps {
			return c.layoutError(ps, vars, fmt.Sprintf("ps sent %d bytes for %q, want %d", len(t.Data), t.Name, 4*p.Len))
		}
		wire.DecodeFloat32s(params[name][p.Offset:p.Offset+p.Len], t.Data)
	}
	return nil
}

// layoutError describes what ps i answered against what the model places
// on it.
func (c *Client) layoutError(ps int, vars []*pb.DenseTensor, detail string) error {
	have := make([]string, len(vars))
	for j, t := range vars {
		have[j] = fmt.Sprintf("%s[%d]", t.Name, len(t.Data)/4)
	}
	return &LayoutError{PS: ps, Addr: c.addrs[ps], Detail: detail, Have: fmt.Sprintf("%d variables %v", len(vars), have), Want: c.layoutOf(ps)}
}

// stepOf is the global step of a pull's answers: ps 0's in asynchronous
// mode (the shards' steps drift by design); in synchronous mode the lowest
// step any ps answered. When the ps disagree (one completed a step the
// others have not, as after a worker died between pushing to one ps and
// the next), the worker's next gradient is tagged with the lowest step: the
// ps behind count it toward the step they wait for, the ps ahead drop it as
// stale. Waiting instead for the ps behind to catch up would wait forever
// when this worker's own gradient is the one they miss.
func (c *Client) stepOf(steps []int64) int64 {
	if !c.isSync() {
		return steps[0]
	}
	return slices.Min(steps)
}
