package replication

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/replica"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Request ids: a push is (worker, step+1), since a worker's pushes to a
// shard carry strictly increasing steps; Init and Done use clients of
// their own, numbered by time.
const (
	initClient = 1 << 20
	doneClient = 2 << 20
	rateClient = 3 << 20
	// heardClient+ps: the entries by which ps, a primary, tells the
	// copies when it heard from each worker (tellHeard).
	heardClient = 4 << 20
)

// shardCopy is one ps's copy of one shard, served at its own address:
// the ps's own shard at its ps address, a copy of an earlier shard at its
// copy address. Init, Push and Done go through the shard's log, so every
// copy applies them in the same order (to fsm, the Server as the log's
// state machine); Pull is answered only by the primary. Every other call
// is the copy's own (server.Server's).
type shardCopy struct {
	*server.Server
	fsm     FSM
	shard   int
	me      int // this ps
	host    *Host
	timeout time.Duration
	applier *applier   // applies the log's entries to fsm, off the host's lock
	holdMu  sync.Mutex // sync mode: one push from its hold to its application (pushHeld)
	logf    func(string, ...any)

	// life ends when the ps gives up on the job (giveUp): a held push
	// waiting for its step's aggregate reads why then.
	life     context.Context
	gaveUpOn context.CancelFunc

	mu      sync.Mutex
	pending map[replica.ReqID]*applied // this ps's own calls waiting for their result
	conns   map[net.Conn]bool          // the workers' connections to this copy
}

func newShardCopy(s, me int, timeout time.Duration) *shardCopy {
	life, gaveUpOn := context.WithCancel(context.Background())
	return &shardCopy{shard: s, me: me, timeout: timeout, life: life, gaveUpOn: gaveUpOn,
		pending: map[replica.ReqID]*applied{}, conns: map[net.Conn]bool{}}
}

// giveUp is the ps giving up on the job with err: every later push and
// waiting pull fails with it (server.Server.GiveUp), a held push too.
func (c *shardCopy) giveUp(err error) {
	c.Server.GiveUp(err)
	c.gaveUpOn()
}

type applied struct {
	resp proto.Message
	err  error
	done bool

	// The request itself, while its call waits: this copy applies it
	// from here rather than from the log entry's bytes (no decoding, and
	// the data path's gradients stay in its connection's buffers). use
	// is held while it is applied; the call takes it before returning, so
	// nothing reads the request after.
	use sync.Mutex
	req proto.Message
}

// apply applies a log entry to this copy, in log order (the applier).
func (c *shardCopy) apply(e replica.Entry) {
	data, _ := e.Data.([]byte)
	if len(data) == 0 {
		return
	}
	var own *applied // this copy's own call, with its request
	if len(e.Reqs) == 1 {
		c.mu.Lock()
		own = c.pending[e.Reqs[0]]
		c.mu.Unlock()
	}
	if own != nil {
		own.use.Lock()
		defer own.use.Unlock()
	}
	resp, err := c.fsm.Apply(e.Seq, data, own.request())
	c.mu.Lock()
	for _, r := range e.Reqs {
		if a := c.pending[r]; a != nil {
			a.resp, a.err, a.done = resp, err, true
		}
	}
	c.mu.Unlock()
}

// drainApplier waits until every entry handed to the copy's applier is
// applied: what reads or replaces the whole copy in the replication
// host's callbacks (a snapshot for a rejoining ps, installing one, a
// re-formation's restore) must see the state at the log position the node
// is at. The applier never calls the host, so waiting there, with the
// host's lock held, is safe.
func (c *shardCopy) drainApplier() {
	if c.applier != nil {
		c.applier.wait(context.Background(), c.applier.mark())
	}
}

// The server is what a copy's log drives.
var _ FSM = (*server.FSM)(nil)

// request is the request of this copy's own call, nil if none.
func (a *applied) request() proto.Message {
	if a == nil {
		return nil
	}
	return a.req
}

// waitServing waits until this ps serves the shard as primary, for at
// most three failover timeouts.
func (c *shardCopy) waitServing(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, 3*c.timeout)
	defer cancel()
	err := c.host.WaitServing(wctx, c.shard)
	if err == nil {
		// Serving counts the entries handed to the applier: read the
		// copy once they are applied.
		err = c.applier.wait(wctx, c.applier.mark())
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		if p := c.host.Primary(c.shard); p >= 0 && p != c.me {
			// The caller gave up first (a worker's status probe at start
			// waits less than three timeouts): send it back to the
			// primary all the same, or it would probe this copy forever.
			go c.dropConns()
		}
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, context.DeadlineExceeded):
		p := c.host.Primary(c.shard)
		if p >= 0 {
			go c.dropConns() // after this answer: the worker goes back to the primary
		}
		return status.Errorf(codes.Unavailable, "this ps does not serve shard %d now (its primary is ps %d)", c.shard, p)
	}
	return status.Errorf(codes.Unavailable, "shard %d: %v", c.shard, err)
}

// propose logs a request and waits until every live copy holds it; it
// returns this copy's result (nil, nil for a retry applied before). ok,
// if not nil, is Host.PushIf's precondition; its error comes back as it is.
func (c *shardCopy) propose(ctx context.Context, id replica.ReqID, req proto.Message, ok func(*replica.Node) error) (proto.Message, error) {
	// A push waits neither for the pushes before it to be held by every
	// copy nor for their update here: it is logged (and shipped) at once,
	// and applied after them. Only a copy that cannot log it now waits,
	// as a pull does, until it serves (a takeover) or says who does.
	if !c.host.Proposable(c.shard) {
		if err := c.waitServing(ctx); err != nil {
			return nil, err
		}
	}
	b, err := server.EncodeEntry(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	a := &applied{req: req}
	c.mu.Lock()
	c.pending[id] = a
	c.mu.Unlock()
	defer func() {
		a.use.Lock() // an apply of the request in progress ends first
		a.req = nil
		a.use.Unlock()
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if err := c.host.PushIf(ctx, c.shard, id, b, ok); err != nil {
		if errors.Is(err, errOtherHistory) {
			return nil, err
		}
		var np *replica.NotPrimaryError
		if errors.As(err, &np) || errors.Is(err, replica.ErrNotPrimary) || errors.Is(err, replica.ErrReformed) {
			return nil, status.Errorf(codes.Unavailable, "shard %d: %v", c.shard, err)
		}
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, status.Errorf(codes.Unavailable, "shard %d: replicating: %v", c.shard, err)
	}
	if done, err := c.waitApplied(ctx, a); err != nil || !done {
		return nil, err
	}
	return a.resp, a.err
}

// waitApplied waits, after the host acknowledged a's request, until this
// copy applied it: the entry, if this copy logged it, was handed to the
// applier before the acknowledgement, and its result comes once applied.
// done is false for a request logged before (a resend: applied then, not
// now).
func (c *shardCopy) waitApplied(ctx context.Context, a *applied) (done bool, err error) {
	ownDone := func() bool { // its own entry applied (mu is the applier's, not c.mu)
		c.mu.Lock()
		defer c.mu.Unlock()
		return a.done
	}
	if err := c.applier.waitFor(ctx, c.applier.mark(), ownDone); err != nil {
		return false, status.FromContextError(err).Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return a.done, nil
}

func timeID(client int) replica.ReqID {
	return replica.ReqID{Client: client, N: uint64(time.Now().UnixNano())}
}

func (c *shardCopy) Init(ctx context.Context, req *pb.InitRequest) (*pb.InitResponse, error) {
	resp, err := c.propose(ctx, timeID(initClient+int(req.Worker)), req, nil)
	if err != nil || resp == nil {
		if err == nil {
			return c.Server.Init(ctx, req) // applied before: a repeated Init changes nothing
		}
		return nil, err
	}
	return resp.(*pb.InitResponse), nil
}

// ChangeRate is logged, so that every copy of the shard switches its rate
// at the same step.
func (c *shardCopy) ChangeRate(ctx context.Context, req *pb.ChangeRateRequest) (*pb.ChangeRateResponse, error) {
	resp, err := c.propose(ctx, timeID(rateClient+int(req.Worker)), req, nil)
	if err != nil {
		return nil, err
	}
	if resp == nil { // applied before
		return &pb.ChangeRateResponse{}, nil
	}
	return resp.(*pb.ChangeRateResponse), nil
}

func (c *shardCopy) Done(ctx context.Context, req *pb.DoneRequest) (*pb.DoneResponse, error) {
	resp, err := c.propose(ctx, timeID(doneClient+int(req.Worker)), req, nil)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return &pb.DoneResponse{}, nil
	}
	return resp.(*pb.DoneResponse), nil
}

// errOtherHistory refuses a push computed against another incarnation of
// the shard (Push).
var errOtherHistory = errors.New("the push was computed against another incarnation of the shard")

func (c *shardCopy) Push(ctx context.Context, req *pb.PushRequest) (*pb.PushResponse, error) {
	// A push computed against another incarnation of the shard (one the
	// worker saw before the cluster re-formed from a checkpoint, sent
	// again after) belongs to a history this copy no longer holds. Logged,
	// its request id (its step, from that history) would stand above the
	// ids of this history's pushes, whose steps start again from the
	// checkpoint's, and they would all be taken for retries of it, answered
	// and never applied. It is answered unlogged instead, with this copy's
	// incarnation: the worker sees the shard restored and recovers as from
	// a restart. The epoch read before the check is still the node's when
	// the push is logged (PushIf), so no re-formation comes in between.
	epoch := c.host.Epoch()
	if other := uint32(req.Incarnation); other != 0 && other != uint32(c.Server.Incarnation()) {
		return c.otherHistory(ctx)
	}
	sameEpoch := func(n *replica.Node) error {
		if n.Epoch() != epoch {
			return errOtherHistory
		}
		return nil
	}
	if c.Server.Sync() {
		return c.pushHeld(ctx, req) // replication after aggregation
	}
	resp, err := c.propose(ctx, replica.ReqID{Client: int(req.Worker), N: uint64(req.Step) + 1}, req, sameEpoch)
	if errors.Is(err, errOtherHistory) {
		return c.otherHistory(ctx)
	}
	if err != nil {
		return nil, err
	}
	if resp == nil { // a retry the log already holds
		st, err := c.Server.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return nil, err
		}
		return &pb.PushResponse{GlobalStep: st.GlobalStep, Incarnation: st.Incarnation}, nil
	}
	return resp.(*pb.PushResponse), nil
}

// otherHistory answers a push not logged because it was computed against
// another incarnation of the shard: dropped, with this copy's step and
// incarnation.
func (c *shardCopy) otherHistory(ctx context.Context) (*pb.PushResponse, error) {
	st, err := c.Server.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return nil, err
	}
	return &pb.PushResponse{GlobalStep: st.GlobalStep, Incarnation: st.Incarnation, Dropped: true, DropReason: errOtherHistory.Error()}, nil
}

// ReplicatedPush is Push for the data path (server.Replicated).
func (c *shardCopy) ReplicatedPush(ctx context.Context, req *pb.PushRequest) (*pb.PushResponse, error) {
	return c.Push(ctx, req)
}

// ReplicatedServing waits until this copy may answer a pull
// (server.Replicated).
func (c *shardCopy) ReplicatedServing(ctx context.Context) error { return c.waitServing(ctx) }

func (c *shardCopy) Pull(ctx context.Context, req *pb.PullRequest) (*pb.PullResponse, error) {
	return c.pull(ctx, req, -1)
}

// pull is Pull; pushStep is the step of the push that came with it, or -1
// (copy_sparse.go).
func (c *shardCopy) pull(ctx context.Context, req *pb.PullRequest, pushStep int64) (*pb.PullResponse, error) {
	if err := c.waitServing(ctx); err != nil {
		return nil, err
	}
	if err := c.pulled(ctx, req, pushStep); err != nil {
		return nil, err
	}
	return c.Server.Pull(ctx, req)
}

// Status and Checkpoint are answered by the primary only, as pulls are:
// a copy that does not serve (a ps started again, before it learns it is
// to rejoin; a backup) would report, or write, a state the workers never
// saw (with replicas a checkpoint is taken from primaries only).
// A copy that does not serve drops its connections after refusing
// (waitServing), so a worker's gRPC connection (Init, Done) goes back to
// the primary.
func (c *shardCopy) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	if err := c.waitServing(ctx); err != nil {
		return nil, err
	}
	return c.Server.Status(ctx, req)
}

func (c *shardCopy) Checkpoint(ctx context.Context, req *pb.CheckpointRequest) (*pb.CheckpointResponse, error) {
	if err := c.waitServing(ctx); err != nil {
		return nil, err
	}
	return c.Server.Checkpoint(ctx, req)
}

func (c *shardCopy) PushPull(ctx context.Context, req *pb.PushPullRequest) (*pb.PullResponse, error) {
	if req.Push == nil || req.Pull == nil {
		return nil, status.Error(codes.InvalidArgument, "PushPull needs both push and pull")
	}
	pr, err := c.Push(ctx, req.Push)
	if err != nil {
		return nil, err
	}
	resp, err := c.pull(ctx, req.Pull, req.Push.Step)
	if err != nil {
		return nil, err
	}
	resp.Push = pr
	return resp, nil
}
