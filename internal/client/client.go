// Package client is what a worker calls to reach the parameter servers:
// Pull, Push and PushPull, each blocking, and PullAsync, PushAsync and
// PushPullAsync, which return a *Call whose Done channel closes when the
// call has landed, so a worker can overlap computation and communication.
// A call that touches several ps contacts them in parallel.
//
// Variables are placed on the ps tasks by package placement; the client
// splits a variable's values into its parts on the way out and joins them
// on the way back, so callers see whole variables (model.Params).
//
// A Client is safe for concurrent use, but two calls in flight must not
// share a Params map: a pull writes into it, and a push reads it while the
// call is being sent.
package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Options configures a Client.
type Options struct {
	Worker int // this worker's index; 0 is the chief
	// Tables are the sparse tables the worker uses.
	Tables []model.Table
	// SplitBytes is the size above which a variable is split across all ps
	// (placement.DefaultSplitBytes if 0). Every worker must use the same.
	SplitBytes int
	// Logf receives log lines (what the client waits for); nil discards.
	Logf func(format string, args ...any)
	// WaitLogEvery is how often a wait logs what it waits for (5s if 0).
	WaitLogEvery time.Duration
	// GRPCOnly sends pushes and pulls by gRPC instead of the data path
	// (docs/WIRE.md), as the client does by itself when a ps does not
	// speak it.
	GRPCOnly bool
	// NoKeyCache sends every sparse call's keys in full on the data path,
	// instead of naming a key set the ps keeps from a recent call by its
	// cache slot: to compare with systems that cache no keys (bench
	// --key_cache=false).
	NoKeyCache bool
	// IncrementalPull keeps the sparse rows the worker pulled, with the
	// version of the ps's table they are of, and a copy of the dense
	// values, with the version of the ps's dense values, and asks each
	// pull only for the rows changed since and those it does not hold,
	// and the dense blocks (wire.DenseBlock values) changed since
	// (docs/WIRE.md, incremental pulls): the answer is bit for bit that of
	// a full pull, with fewer bytes. On the data path only (a ps that does
	// not speak it gets full pulls). It costs the worker memory for the
	// rows it keeps (at most MaxHeldRows per table and ps) and a copy of
	// its dense variables.
	IncrementalPull bool
	// Dial, if set, makes the connections to the ps (gRPC's and the data
	// path's) instead of TCP: the transport seam, through which tests run
	// whole clusters over an in-memory network (package memnet).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// ProbeAfter and ProbeTimeout are the health checks of a call that
	// waits (probe.go): after ProbeAfter (15s if 0) the ps is asked for its
	// Status, and a ps that does not answer within ProbeTimeout (20s if 0)
	// ends the call with ErrUnavailable. Tests make them small.
	ProbeAfter, ProbeTimeout time.Duration
	// ThreadReads is for a caller whose goroutine is locked to its OS
	// thread, as a cgo callback's is (the Python library's calls): the
	// data path's TCP connections are read and written with plain system
	// calls on the calling thread, a wait in poll(2) there, outside Go's
	// netpoller (threadconn_linux.go), and a small call to several ps
	// reads their answers one after the other on that thread instead of
	// on a goroutine each. A locked goroutine that parks hands its
	// thread's P to another thread and back, two or three thread switches
	// a round trip. Linux only; elsewhere the option does nothing.
	ThreadReads bool
}

// Client talks to every ps of a cluster.
type Client struct {
	opts   Options
	addrs  []string
	conns  []*grpcConn
	ps     []pb.ParamServerClient
	plan   placement.Plan
	varOf  map[string]string         // variable name by part (shard-local) name
	varOpt map[string]*optim.Config  // a variable's own update rule, by name (nil: the job's)
	part   map[string]placement.Part // part by part name
	byPS   [][]placement.Part
	// tableDim is the row width of each sparse table.
	tableDim map[string]int

	mu           sync.Mutex // guards sync and incarnations
	sync         bool       // the cluster trains synchronously (learned from Init or Status)
	incarnations []uint64   // per ps, the incarnation last seen (0: none yet)

	dp *dataPath // pushes and pulls on the data path; nil with GRPCOnly
}

// MaxVarName bounds a variable's name: its part names ("w/part_12") must
// fit the data path's names (wire.MaxName bytes).
const MaxVarName = wire.MaxName - 16

// MaxVarValues bounds a variable's values (2^31-1 float32), as a ps does.
const MaxVarValues = math.MaxInt32

// checkVars refuses what every ps would refuse, at once and on every
// worker: a name too long for the data path (before, the chief's Init
// accepted one and every push then failed), a shape of more values than a
// ps holds (before, a worker other than the chief started with one).
func checkVars(vars []model.Variable) error {
	for _, v := range vars {
		if len(v.Name) > MaxVarName {
			return fmt.Errorf("client: variable %.40q... has a %d-byte name (want at most %d)", v.Name, len(v.Name), MaxVarName)
		}
		n := uint64(1)
		for _, d := range v.Shape {
			if d <= 0 {
				return fmt.Errorf("client: variable %q has shape %v; every dimension must be positive", v.Name, v.Shape)
			}
			hi, lo := bits.Mul64(n, uint64(d))
			if hi != 0 || lo > MaxVarValues {
				return fmt.Errorf("client: variable %q has shape %v: more than %d values (8 GiB), the most a ps holds in one variable", v.Name, v.Shape, MaxVarValues)
			}
			n = lo
		}
	}
	return nil
}

// New prepares a client for the ps at addrs and the model's variables. It
// does not connect yet: connections are made on first use and retried.
func New(addrs []string, vars []model.Variable, opts Options) (*Client, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.WaitLogEvery <= 0 {
		opts.WaitLogEvery = 5 * time.Second
	}
	if opts.ProbeAfter <= 0 {
		opts.ProbeAfter = defaultProbeAfter
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = defaultProbeTimeout
	}
	if err := checkVars(vars); err != nil {
		return nil, err
	}
	plan, err := placement.Place(len(addrs), vars, opts.SplitBytes)
	if err != nil {
		return nil, err
	}
	c := &Client{opts: opts, addrs: addrs, plan: plan, incarnations: make([]uint64, len(addrs)), varOf: make(map[string]string), part: make(map[string]placement.Part), byPS: make([][]placement.Part, len(addrs))}
	for ps := range addrs {
		c.byPS[ps] = plan.OnPS(ps)
	}
	c.tableDim = make(map[string]int, len(opts.Tables))
	for _, t := range opts.Tables {
		if _, dup := c.tableDim[t.Name]; dup || t.Name == "" || t.Dim < 1 {
			return nil, fmt.Errorf("client: table %q (dim %d) is unnamed, listed twice, or has dim < 1", t.Name, t.Dim)
		}
		c.tableDim[t.Name] = t.Dim
	}
	c.varOpt = make(map[string]*optim.Config)
	for _, v := range plan.Vars {
		c.varOpt[v.Name] = v.Optimizer
		for _, p := range v.Parts {
			c.varOf[p.Name] = v.Name
			c.part[p.Name] = p
		}
	}
	for _, addr := range addrs {
		conn, err := dialGRPC(addr, opts.Dial)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("client: ps address %q: %w", addr, err)
		}
		c.conns = append(c.conns, conn)
		c.ps = append(c.ps, pb.NewParamServerClient(conn))
	}
	if !opts.GRPCOnly {
		c.dp = newDataPath(c)
	}
	return c, nil
}

// Close closes the connections.
func (c *Client) Close() error {
	var errs []error
	if c.dp != nil {
		c.dp.close()
	}
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}

// Plan is the placement of the variables on the ps tasks.
func (c *Client) Plan() placement.Plan { return c.plan }

// NumPS is the number of ps tasks.
func (c *Client) NumPS() int { return len(c.ps) }

func (c *Client) isSync() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sync
}

// WaitReady blocks until every ps answers, and, with needInit, until every
// ps has been initialised by the chief. Every WaitLogEvery it logs what it
// still waits for ("waiting for ps 1 at 127.0.0.1:2225: connection
// refused"). It gives up when ctx ends, naming what never came.
func (c *Client) WaitReady(ctx context.Context, needInit bool) ([]*pb.StatusResponse, error) {
	statuses := make([]*pb.StatusResponse, len(c.ps))
	lastErr := make([]string, len(c.ps)) // why each ps last failed to answer
	lastLog := time.Now()
	for {
		var waiting []string
		onlyInit := true // every ps waited for answers: the next round's calls wait for Init
		for i, ps := range c.ps {
			if statuses[i] != nil && (!needInit || statuses[i].Initialized) {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			longPoll := statuses[i] != nil
			if longPoll {
				// The ps answers but waits for the chief's Init: it
				// answers this call as soon as that comes.
				cctx = withWaitInit(cctx, "1500ms")
			}
			called := time.Now()
			st, err := ps.Status(cctx, c.statusRequest())
			cancel()
			if err == nil && longPoll && !st.Initialized && time.Since(called) < time.Second {
				onlyInit = false // a ps that does not wait: poll it
			}
			switch {
			case errors.Is(err, ErrVersion):
				return nil, fmt.Errorf("ps %d at %s: %w", i, c.addrs[i], err)
			case err != nil && cutByWaitEnd(ctx, called.Add(2*time.Second), err) && statuses[i] != nil:
				// The wait ended during the long poll of a ps that had
				// answered: what never came is the chief's Init, not the ps.
				waiting = append(waiting, fmt.Sprintf("the chief to initialise ps %d at %s", i, c.addrs[i]))
			case err != nil && cutByWaitEnd(ctx, called.Add(2*time.Second), err) && lastErr[i] != "":
				// Cut by the wait's end: the ps's own last answer says more.
				waiting = append(waiting, fmt.Sprintf("ps %d at %s (%s)", i, c.addrs[i], lastErr[i]))
			case err != nil:
				lastErr[i] = shortErr(err)
				onlyInit = false
				waiting = append(waiting, fmt.Sprintf("ps %d at %s (%s)", i, c.addrs[i], shortErr(err)))
			case needInit && !st.Initialized:
				statuses[i] = st
				waiting = append(waiting, fmt.Sprintf("the chief to initialise ps %d at %s", i, c.addrs[i]))
			default:
				statuses[i] = st
			}
		}
		if len(waiting) == 0 {
			c.Remember(statuses)
			if needInit {
				c.mu.Lock()
				c.sync = statuses[0].Mode == "sync"
				c.mu.Unlock()
			}
			return statuses, nil
		}
		if time.Since(lastLog) >= c.opts.WaitLogEvery {
			c.opts.Logf("waiting for %s", joinWaits(waiting))
			lastLog = time.Now()
		}
		pause := 200 * time.Millisecond
		if onlyInit {
			pause = 0
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("gave up waiting for %s: %w", joinWaits(waiting), context.Cause(ctx))
		case <-time.After(pause):
		}
	}
}

// cutByWaitEnd reports whether a call of WaitReady that failed with err
// was cut by the end of the whole wait (ctx) rather than by the ps: ctx is
// done, or the call ran out of time at ctx's deadline, which came before
// its own (callDeadline); the ps may end the call at that deadline a moment
// before ctx's timer fires.
func cutByWaitEnd(ctx context.Context, callDeadline time.Time, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !dl.After(callDeadline) && isDeadline(err)
}

func joinWaits(w []string) string {
	s := w[0]
	for _, x := range w[1:] {
		s += "; " + x
	}
	return s
}

// InitOptions are the chief's choices for the whole cluster.
type InitOptions struct {
	Optimizer           optim.Config
	Sync                bool
	ReplicasToAggregate int
	NumWorkers          int
	GlobalStep          int64
	MaxStaleness        int64
	// SyncTimeout bounds how long a synchronous step waits for missing
	// gradients (0: forever); then it completes with those that came when
	// SyncProceed, else the job fails naming the missing workers.
	SyncTimeout time.Duration
	SyncProceed bool
	// GoalStep is the job's last step (0: none): each ps drops the pushes
	// past it, so the parameters stand still once every ps is there.
	GoalStep int64
}

// IsSync reports whether the cluster trains synchronously, as the ps said
// (after WaitReady with needInit, or Init).
func (c *Client) IsSync() bool { return c.isSync() }

// Tables returns the sparse tables the client was made with.
func (c *Client) Tables() []model.Table { return c.opts.Tables }

// Addr returns the address of ps i.
func (c *Client) Addr(i int) string { return c.addrs[i] }

// Init sends every ps its part of the initial values and the training mode.
// It returns the global step (the ps's own if they were already
// initialised, as after a chief restart).
func (c *Client) Init(ctx context.Context, values model.Params, o InitOptions) (int64, error) {
	for _, v := range c.plan.Vars {
		if got := len(values[v.Name]); got != v.Size() {
			return 0, fmt.Errorf("client: initial value of %q has %d elements, want %d", v.Name, got, v.Size())
		}
	}
	steps := make([]int64, len(c.ps))
	err := c.eachCtx(ctx, func(ctx context.Context, i int) error {
		req := &pb.InitRequest{
			Worker:              int32(c.opts.Worker),
			Optimizer:           pbOptimizer(&o.Optimizer),
			Sync:                o.Sync,
			ReplicasToAggregate: int32(o.ReplicasToAggregate),
			NumWorkers:          int32(o.NumWorkers),
			GlobalStep:          o.GlobalStep,
			MaxStaleness:        o.MaxStaleness,
			SyncTimeoutMs:       o.SyncTimeout.Milliseconds(),
			SyncProceed:         o.SyncProceed,
			SplitBytes:          int64(c.opts.SplitBytes),
			GoalStep:            o.GoalStep,
		}
		for _, t := range c.opts.Tables {
			req.Tables = append(req.Tables, &pb.TableSpec{
				Name: t.Name, Dim: int32(t.Dim), Initializer: t.Init, InitStddev: t.InitStddev, Seed: t.Seed,
				MinCount: t.MinCount, EvictAfterSteps: t.EvictAfterSteps, Optimizer: pbOptimizer(t.Optimizer),
			})
		}
		for _, p := range c.byPS[i] {
			shape := make([]int64, len(p.Shape))
			for j, d := range p.Shape {
				shape[j] = int64(d)
			}
			full := values[c.varOf[p.Name]]
			req.Vars = append(req.Vars, &pb.VarSpec{Name: p.Name, Shape: shape, Init: wire.Float32Bytes(full[p.Offset : p.Offset+p.Len]),
				Optimizer: pbOptimizer(c.varOpt[c.varOf[p.Name]])})
		}
		var resp *pb.InitResponse
		err := c.watched(ctx, i, func(ctx context.Context) (err error) {
			resp, err = c.callInit(ctx, i, req)
			return err
		})
		if err != nil {
			return err
		}
		steps[i] = resp.GlobalStep
		return nil
	})
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.sync = o.Sync
	c.mu.Unlock()
	if st, err := c.Status(ctx); err == nil {
		c.Remember(st)
		c.mu.Lock()
		c.sync = st[0].Mode == "sync"
		c.mu.Unlock()
	}
	return steps[0], nil
}

// each runs f for every ps in parallel and joins the errors, each naming
// its ps and of its kind (classify). Every ps is tried, whatever the others
// answer (Done).
func (c *Client) each(f func(ps int) error) error {
	errs := make([]error, len(c.ps))
	var wg sync.WaitGroup
	for i := range c.ps {
		wg.Go(func() {
			if err := f(i); err != nil {
				errs[i] = fmt.Errorf("ps %d at %s: %w", i, c.addrs[i], c.classify(i, err))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// errSibling cancels the calls of a request to the other ps once one ps
// failed.
var errSibling = errors.New("another ps of the same request failed")

// eachCtx is each, but once one ps fails the calls to the others are
// cancelled (their answers are of no use: the worker recovers and pulls
// again), so that a call waiting on one ps (a synchronous pull) never
// outlives the failure of another. The errors of the calls cancelled so
// are left out.
func (c *Client) eachCtx(ctx context.Context, f func(ctx context.Context, ps int) error) error {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errs := make([]error, len(c.ps))
	var wg sync.WaitGroup
	for i := range c.ps {
		wg.Go(func() {
			err := f(cctx, i)
			if err == nil {
				return
			}
			if ctx.Err() == nil && errors.Is(context.Cause(cctx), errSibling) {
				return // cancelled because another ps failed
			}
			errs[i] = fmt.Errorf("ps %d at %s: %w", i, c.addrs[i], c.classify(i, err))
			cancel(errSibling)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Status asks every ps for its state.
func (c *Client) Status(ctx context.Context) ([]*pb.StatusResponse, error) {
	out := make([]*pb.StatusResponse, len(c.ps))
	err := c.eachCtx(ctx, func(ctx context.Context, i int) error {
		return c.watched(ctx, i, func(ctx context.Context) (err error) {
			out[i], err = c.ps[i].Status(ctx, c.statusRequest())
			return err
		})
	})
	return out, err
}

// ChangeRate changes the job's learning rate and schedule on every ps from
// global step c.From on. The chief calls it; the change is checked here
// first, so a bad one reaches no ps. It returns the highest step a ps was
// at when the change arrived: a From below it took effect late on that ps.
func (c *Client) ChangeRate(ctx context.Context, ch optim.RateChange) (int64, error) {
	if _, err := optim.NewScheduled(optim.Config{Name: "sgd", LearningRate: ch.LearningRate, Schedule: ch.Schedule}, []optim.RateChange{ch}); err != nil {
		return 0, err
	}
	steps := make([]int64, len(c.ps))
	err := c.eachCtx(ctx, func(ctx context.Context, i int) error {
		return c.watched(ctx, i, func(ctx context.Context) error {
			resp, err := c.ps[i].ChangeRate(ctx, &pb.ChangeRateRequest{Worker: int32(c.opts.Worker), FromStep: ch.From,
				LearningRate: ch.LearningRate, Schedule: ch.Schedule})
			if err == nil {
				steps[i] = resp.GlobalStep
			}
			return err
		})
	})
	return slices.Max(append(steps, 0)), err
}

// Done tells every ps that this worker has finished.
func (c *Client) Done(ctx context.Context) error {
	return c.each(func(i int) error {
		_, err := c.ps[i].Done(ctx, &pb.DoneRequest{Worker: int32(c.opts.Worker)})
		return err
	})
}

// GaveUp tells every ps it can reach that this worker gave up on the
// job, and why: the ps counts it as ended, not done (once every worker
// has ended so, it exits non-zero naming them). Each ps is tried once,
// all at once, within ctx; it returns the ps that could not be told.
func (c *Client) GaveUp(ctx context.Context, why string) (missed []int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range c.ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.ps[i].Done(ctx, &pb.DoneRequest{Worker: int32(c.opts.Worker), GaveUp: why}); err != nil {
				mu.Lock()
				missed = append(missed, i)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(missed)
	return missed
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// pbOptimizer is an update rule as Init sends it; nil stays nil (the job's).
func pbOptimizer(o *optim.Config) *pb.OptimizerConfig {
	if o == nil {
		return nil
	}
	return &pb.OptimizerConfig{
		Name: o.Name, LearningRate: o.LearningRate, Momentum: o.Momentum,
		Nesterov: o.Nesterov, InitialAccumulator: o.InitialAccumulator,
		Beta1: o.Beta1, Beta2: o.Beta2, Epsilon: o.Epsilon,
		FtrlBeta: o.FTRLBeta, L1: o.L1, L2: o.L2, L2Shrinkage: o.L2Shrinkage,
		Rho: o.Rho, Centered: o.Centered, WeightDecay: o.WeightDecay, Schedule: o.Schedule,
		LearningRatePower: o.LearningRatePower,
	}
}
