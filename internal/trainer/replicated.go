package trainer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"runtime"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/replica"
	"github.com/paramserv/paramserv/internal/replication"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Replication configures replicated shards (--replicas, docs/REPLICATION.md).
// Replicas <= 1 is today's cluster: none of this runs.
type Replication struct {
	Replicas        int
	FailoverTimeout time.Duration
	// Hosts are, for each ps p in order, Replicas addresses: where p's
	// replication peer listens, then where p serves its copy of shard
	// p-1, p-2, … (mod the number of ps).
	Hosts []string
}

// Enabled reports whether shards are replicated.
func (r Replication) Enabled() bool { return r.Replicas > 1 }

// Check says what is wrong with r for a cluster of n ps.
func (r Replication) Check(n int) error {
	if !r.Enabled() {
		return nil
	}
	if r.Replicas > n {
		return fmt.Errorf("--replicas=%d with %d ps: want 1 to %d (no two copies of a shard on one ps)", r.Replicas, n, n)
	}
	if r.FailoverTimeout <= 0 {
		return fmt.Errorf("--failover_timeout=%v: want > 0", r.FailoverTimeout)
	}
	if len(r.Hosts) != n*r.Replicas {
		return fmt.Errorf("--replica_hosts: %d addresses, want %d (%d per ps: replication, then a copy of each earlier shard)", len(r.Hosts), n*r.Replicas, r.Replicas)
	}
	return nil
}

// copyAddr is where ps q serves its copy of shard s ("" for q's own shard,
// which it serves at its ps address).
func (r Replication) copyAddr(q, s, n int) string {
	k := ((q-s)%n + n) % n
	return r.Hosts[q*r.Replicas+k]
}

// copies are the addresses of shard s's copies in order of succession.
func (r Replication) copies(s int, psAddrs []string) []string {
	n := len(psAddrs)
	out := []string{psAddrs[s]}
	for _, q := range replica.Members(s, n, r.Replicas)[1:] {
		out = append(out, r.copyAddr(q, s, n))
	}
	return out
}

// Entry kinds of the replicated log: a request applied by every copy.
const (
	entryInit byte = iota + 1
	entryPush
	entryDone
)

// Request ids: a push is (worker, step+1), since a worker's pushes to a
// shard carry strictly increasing steps; Init and Done use clients of
// their own, numbered by time.
const (
	initClient = 1 << 20
	doneClient = 2 << 20
)

// replicatedCopy is one ps's copy of one shard, served at its own address:
// the ps's own shard at its ps address, a copy of an earlier shard at its
// copy address. Init, Push and Done go through the shard's log, so every
// copy applies them in the same order; Pull is answered only by the
// primary. Every other call is the copy's own (server.Server's).
type replicatedCopy struct {
	*server.Server
	shard   int
	me      int // this ps
	host    *replication.Host
	timeout time.Duration
	applier *applier   // applies the log's entries to the copy, off the host's lock
	holdMu  sync.Mutex // sync mode: one push from its hold to its application (pushHeld)
	logf    func(string, ...any)
	scratch []float32 // the applier's: a backup's gradients, decoded (decodeDensePush)

	mu      sync.Mutex
	pending map[replica.ReqID]*applied // this ps's own calls waiting for their result
	conns   map[net.Conn]bool          // the workers' connections to this copy
}

// accepted tracks the connections l accepts, so that a copy that is not
// the primary can send its workers back to it (dropConns).
func (c *replicatedCopy) accepted(l net.Listener) net.Listener { return &trackingListener{l, c} }

type trackingListener struct {
	net.Listener
	c *replicatedCopy
}

func (t *trackingListener) Accept() (net.Conn, error) {
	conn, err := t.Listener.Accept()
	if err == nil {
		t.c.mu.Lock()
		t.c.conns[conn] = true
		t.c.mu.Unlock()
		conn = &trackedConn{conn, t.c}
	}
	return conn, err
}

type trackedConn struct {
	net.Conn
	c *replicatedCopy
}

func (t *trackedConn) Close() error {
	t.c.mu.Lock()
	delete(t.c.conns, t.Conn)
	t.c.mu.Unlock()
	return t.Conn.Close()
}

// dropConns closes the workers' connections to this copy: a worker that
// reached a copy while its primary was only slow (at start, or under
// load) dials again, and its dialler tries the primary first.
func (c *replicatedCopy) dropConns() {
	c.mu.Lock()
	conns := c.conns
	c.conns = map[net.Conn]bool{}
	c.mu.Unlock()
	for conn := range conns {
		conn.Close()
	}
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

// apply applies a log entry to this copy, in log order (the host's loop).
func (c *replicatedCopy) apply(e replica.Entry) {
	data, _ := e.Data.([]byte)
	if len(data) == 0 {
		return
	}
	ctx := context.Background()
	var resp proto.Message
	var err error
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
	switch data[0] {
	case entryPush:
		req, _ := own.request().(*pb.PushRequest)
		if req == nil {
			var ok bool
			if req, ok = decodeDensePush(data[1:], &c.scratch); !ok {
				req = &pb.PushRequest{}
				err = proto.Unmarshal(data[1:], req)
			}
		}
		if err == nil {
			resp, err = c.Server.Push(ctx, req)
		}
	case entryInit:
		req := &pb.InitRequest{}
		if err = proto.Unmarshal(data[1:], req); err == nil {
			resp, err = c.Server.Init(ctx, req)
		}
	case entryAggregate:
		err = c.applyAggregate(data[1:])
		if err != nil {
			c.logf("log entry %d: %v", e.Seq, err)
		}
	case entryDone:
		req := &pb.DoneRequest{}
		if err = proto.Unmarshal(data[1:], req); err == nil {
			resp, err = c.Server.Done(ctx, req)
		}
	case entryTouch:
		if err = c.applyTouch(data[1:]); err != nil {
			c.logf("log entry %d: %v", e.Seq, err)
		}
	case entryRestore:
		req := &pb.RestoreRequest{}
		if err = proto.Unmarshal(data[1:], req); err == nil {
			resp, err = c.applyRestore(req)
		}
	default:
		err = fmt.Errorf("shard %d: log entry %d of unknown kind %d", c.shard, e.Seq, data[0])
	}
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
func (c *replicatedCopy) drainApplier() {
	if c.applier != nil {
		c.applier.wait(context.Background(), c.applier.mark())
	}
}

// request is the request of this copy's own call, nil if none.
func (a *applied) request() proto.Message {
	if a == nil {
		return nil
	}
	return a.req
}

// waitServing waits until this ps serves the shard as primary, for at
// most three failover timeouts.
func (c *replicatedCopy) waitServing(ctx context.Context) error {
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
// returns this copy's result (nil, nil for a retry applied before).
func (c *replicatedCopy) propose(ctx context.Context, kind byte, id replica.ReqID, req proto.Message) (proto.Message, error) {
	// A push waits neither for the pushes before it to be held by every
	// copy nor for their update here: it is logged (and shipped) at once,
	// and applied after them. Only a copy that cannot log it now waits,
	// as a pull does, until it serves (a takeover) or says who does.
	if !c.host.Proposable(c.shard) {
		if err := c.waitServing(ctx); err != nil {
			return nil, err
		}
	}
	// One copy of the request's bytes: the entry is the kind, then the
	// request marshalled after it.
	b := make([]byte, 1, 1+proto.Size(req))
	b[0] = kind
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, req)
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
	if err := c.host.Push(ctx, c.shard, id, b); err != nil {
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
func (c *replicatedCopy) waitApplied(ctx context.Context, a *applied) (done bool, err error) {
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

// andList is "0 and 1", "0, 1 and 2".
func andList(xs []int) string {
	var b strings.Builder
	for i, x := range xs {
		switch {
		case i == 0:
		case i == len(xs)-1:
			b.WriteString(" and ")
		default:
			b.WriteString(", ")
		}
		fmt.Fprint(&b, x)
	}
	return b.String()
}

func timeID(client int) replica.ReqID {
	return replica.ReqID{Client: client, N: uint64(time.Now().UnixNano())}
}

func (c *replicatedCopy) Init(ctx context.Context, req *pb.InitRequest) (*pb.InitResponse, error) {
	resp, err := c.propose(ctx, entryInit, timeID(initClient+int(req.Worker)), req)
	if err != nil || resp == nil {
		if err == nil {
			return c.Server.Init(ctx, req) // applied before: a repeated Init changes nothing
		}
		return nil, err
	}
	return resp.(*pb.InitResponse), nil
}

func (c *replicatedCopy) Done(ctx context.Context, req *pb.DoneRequest) (*pb.DoneResponse, error) {
	resp, err := c.propose(ctx, entryDone, timeID(doneClient+int(req.Worker)), req)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return &pb.DoneResponse{}, nil
	}
	return resp.(*pb.DoneResponse), nil
}

func (c *replicatedCopy) Push(ctx context.Context, req *pb.PushRequest) (*pb.PushResponse, error) {
	if c.Server.Sync() {
		return c.pushHeld(ctx, req) // replication after aggregation
	}
	resp, err := c.propose(ctx, entryPush, replica.ReqID{Client: int(req.Worker), N: uint64(req.Step) + 1}, req)
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

// ReplicatedPush is Push for the data path (server.Replicated).
func (c *replicatedCopy) ReplicatedPush(ctx context.Context, req *pb.PushRequest) (*pb.PushResponse, error) {
	return c.Push(ctx, req)
}

// ReplicatedServing waits until this copy may answer a pull
// (server.Replicated).
func (c *replicatedCopy) ReplicatedServing(ctx context.Context) error { return c.waitServing(ctx) }

func (c *replicatedCopy) Pull(ctx context.Context, req *pb.PullRequest) (*pb.PullResponse, error) {
	return c.pull(ctx, req, -1)
}

// pull is Pull; pushStep is the step of the push that came with it, or -1
// (replicated_sparse.go).
func (c *replicatedCopy) pull(ctx context.Context, req *pb.PullRequest, pushStep int64) (*pb.PullResponse, error) {
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
func (c *replicatedCopy) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	if err := c.waitServing(ctx); err != nil {
		return nil, err
	}
	return c.Server.Status(ctx, req)
}

func (c *replicatedCopy) Checkpoint(ctx context.Context, req *pb.CheckpointRequest) (*pb.CheckpointResponse, error) {
	if err := c.waitServing(ctx); err != nil {
		return nil, err
	}
	return c.Server.Checkpoint(ctx, req)
}

func (c *replicatedCopy) PushPull(ctx context.Context, req *pb.PushPullRequest) (*pb.PullResponse, error) {
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

// incarnations gives every copy of shard s the same incarnation ids: a
// hash of the cluster and the shard, then one more per restore (restores
// at start happen on every copy alike), counted afresh in each epoch of
// the membership (a re-formation, where every copy restores the newest
// checkpoint once: newEpoch).
type incarnations struct {
	base uint64
	mu   sync.Mutex
	e, k uint64
}

func newIncarnations(psAddrs []string, s int) *incarnations {
	h := fnv.New64a()
	for _, a := range psAddrs {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	fmt.Fprintf(h, "shard %d", s)
	return &incarnations{base: h.Sum64() | 1}
}

func (in *incarnations) next() uint64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.k++
	return in.base + in.e<<20 + in.k
}

// follow makes id, an incarnation another copy of the shard gave (a copy
// installed at a rejoin carries it), the last one handed out, so that the
// next restore gives this copy the id it gives every other copy. An id of
// another epoch or shard (not of this counter's form) leaves it alone.
func (in *incarnations) follow(id uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if k := id - in.base - in.e<<20; k < 1<<20 {
		in.k = k
	}
}

func (in *incarnations) newEpoch(e uint64) {
	in.mu.Lock()
	in.e, in.k = e, 0
	in.mu.Unlock()
}

// runReplicatedPS is RunPS with --replicas > 1: this ps serves its own
// shard and a copy of each of the Replicas-1 shards before it, each at
// its own address, and replicates through a replication.Host. A ps that
// learns it was removed exits (status 1); `paramserv local` restarts no
// ps under --replicas, since a restarted ps would not be let back in
// (re-replication is not built).
func runReplicatedPS(ctx context.Context, cfg Config) error {
	rc := cfg.Replication
	psAddrs := cfg.Cluster.Spec.PS
	n, me := len(psAddrs), cfg.Cluster.Task.Index
	floor := holdGCFloor()
	defer runtime.KeepAlive(floor)
	if err := rc.Check(n); err != nil {
		return &ConfigError{Err: err}
	}
	listen := cfg.Listen
	if listen == nil {
		listen = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	var lis []net.Listener
	defer func() {
		for _, l := range lis {
			l.Close()
		}
	}()
	open := func(addr string) (net.Listener, error) {
		l, err := listen(addr)
		if err != nil {
			return nil, &ConfigError{Err: &server.ListenError{Addr: addr, Err: err}}
		}
		lis = append(lis, l)
		return l, nil
	}
	replAddrs := make([]string, n)
	for q := range n {
		replAddrs[q] = rc.Hosts[q*rc.Replicas]
	}
	replLis, err := open(replAddrs[me])
	if err != nil {
		return err
	}
	shards := replica.Shards(me, n, rc.Replicas)
	copies := map[int]*replicatedCopy{}
	incs := map[int]*incarnations{}
	for _, s := range shards {
		incs[s] = newIncarnations(psAddrs, s)
		c := &replicatedCopy{shard: s, me: me, timeout: rc.FailoverTimeout, pending: map[replica.ReqID]*applied{}, conns: map[net.Conn]bool{}}
		c.Server = server.New(server.Config{
			Task: s, NumPS: n, NumWorkers: len(cfg.Cluster.Spec.Workers), Logf: shardLogf(cfg.Logf, s),
			WaitLogEvery: cfg.WaitLogEvery, CheckpointDir: cfg.CheckpointDir, Incarnation: incs[s].next,
			Replicated: c, // the data path's pushes go through the shard's log
			Aggregated: c.aggregated,
		})
		c.logf = shardLogf(cfg.Logf, s)
		c.applier = newApplier(c.apply)
		copies[s] = c
		if _, err := copies[s].RestoreLatest(); err != nil {
			return fmt.Errorf("ps %d: restoring shard %d from %s: %w", me, s, cfg.CheckpointDir, err)
		}
	}
	// Start the node only once every peer listens, so that a slow start is
	// not taken for a silence.
	if err := waitPeers(ctx, cfg, replAddrs); err != nil {
		return err
	}
	removed := make(chan struct{})
	var removedOnce sync.Once
	joining := make(chan struct{}, 1)
	host, err := replication.Start(replication.Config{
		Config: replica.Config{ID: me, N: n, R: rc.Replicas, Timeout: rc.FailoverTimeout},
		Addrs:  replAddrs, Listener: replLis, Dial: cfg.Dial,
		Apply: func(e replica.Entry) {
			if c := copies[e.Shard]; c != nil {
				c.applier.add(e)
			}
		},
		Snapshot: func(s int) ([]byte, error) {
			if c := copies[s]; c != nil {
				c.drainApplier() // the snapshot is taken at the seq handed out last
				return c.Server.EncodeCopy()
			}
			return nil, fmt.Errorf("ps %d holds no copy of shard %d", me, s)
		},
		Install: func(s int, b []byte) error {
			if c := copies[s]; c != nil {
				c.drainApplier() // nothing older lands on top of the copy
				if err := c.Server.InstallCopy(b); err != nil {
					return err
				}
				incs[s].follow(c.Server.Incarnation())
				return nil
			}
			return fmt.Errorf("ps %d holds no copy of shard %d", me, s)
		},
		Reformed: func(r replica.Reform) { // every copy falls back to the newest checkpoint
			before, after := int64(-1), int64(-1)
			for _, s := range shards {
				st, _ := copies[s].Server.Status(context.Background(), &pb.StatusRequest{})
				before = max(before, st.GetGlobalStep())
				incs[s].newEpoch(r.Epoch)
				copies[s].drainApplier() // nothing of the old epoch lands on the restored state
				ok, err := copies[s].RestoreLatest()
				switch {
				case err != nil:
					cfg.Logf("ps %d: shard %d: restoring the newest checkpoint of %s: %v", me, s, cfg.CheckpointDir, err)
				case !ok:
					cfg.Logf("ps %d: shard %d: no checkpoint in %q to fall back to: the job cannot go on (run with --checkpoint_dir and --save_steps)", me, s, cfg.CheckpointDir)
				default:
					st, _ := copies[s].Server.Status(context.Background(), &pb.StatusRequest{})
					after = st.GetGlobalStep()
				}
			}
			if r.By == me {
				for _, s := range r.Lost {
					cfg.Logf("ps %d: every copy of shard %d lost (ps %s); falling back to the checkpoint of step %d; %d steps lost", me, s, andList(replica.Members(s, n, rc.Replicas)), after, max(0, before-after))
				}
			} else {
				cfg.Logf("ps %d: the cluster re-formed (by ps %d) from the checkpoint of step %d (this ps was at step %d)", me, r.By, after, before)
			}
		},
		Joining: func() { // on the host's loop: the work is done below
			select {
			case joining <- struct{}{}:
			default:
			}
		},
		TookOver: func(ss []int) {
			for _, s := range ss {
				a := copies[s].applier
				_ = a.wait(context.Background(), a.mark())
				st, _ := copies[s].Server.Status(context.Background(), &pb.StatusRequest{})
				cfg.Logf("ps %d took over shard %d at global step %d (failover)", me, s, st.GetGlobalStep())
			}
		},
		Lost: func(ss []int) {
			cfg.Logf("ps %d: every copy of shards %v is lost: the job cannot go on without them; the workers give up after --recovery_timeout, and a new job restores the last checkpoint", me, ss)
		},
		Logf: cfg.Logf,
	})
	if err != nil {
		return err
	}
	defer host.Close()
	stopApply := make(chan struct{})
	defer close(stopApply)
	for _, c := range copies {
		go c.applier.run(stopApply)
	}
	for _, c := range copies {
		c.host = host
	}
	own, err := openReopenable(cfg.Cluster.Addr(), listen)
	if err != nil {
		return &ConfigError{Err: &server.ListenError{Addr: cfg.Cluster.Addr(), Err: err}}
	}
	defer own.Close()
	go func() { // a removed ps stops serving for good
		for {
			select {
			case <-ctx.Done():
				return
			case <-joining:
				// Started again: the others know this ps as its old
				// process. Its own shard has another primary now, so it
				// refuses the workers at its address (their dialler then
				// goes on to the copy that serves) until it serves it again.
				cfg.Logf("ps %d: started again while the job runs: rejoining as a new copy of shards %v (they are copied from their primaries)", me, shards)
				own.pause()
				copies[me].dropConns()
			case <-time.After(rc.FailoverTimeout / 4):
			}
			if host.Stopped() {
				removedOnce.Do(func() { close(removed) })
				return
			}
			if own.paused() && host.Primary(me) == me && !host.Joining() {
				if err := own.resume(); err != nil {
					cfg.Logf("ps %d: listening again at %s for shard %d: %v", me, cfg.Cluster.Addr(), me, err)
				}
			}
		}
	}()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(shards))
	var gs []*grpc.Server
	for _, s := range shards {
		var l net.Listener = own
		if s != me {
			if l, err = open(rc.copyAddr(me, s, n)); err != nil {
				return err
			}
		}
		g := grpc.NewServer(server.GRPCOptions()...)
		pb.RegisterParamServerServer(g, copies[s])
		gs = append(gs, g)
		// gRPC and the data path share the address, as on a ps without
		// replicas.
		gl, stopMux := copies[s].Mux(copies[s].accepted(l))
		defer stopMux()
		go func() { errc <- g.Serve(gl) }()
		cfg.Logf("ps %d: serving shard %d on %s (%d copies, failover after %s)", me, s, l.Addr(), rc.Replicas, rc.FailoverTimeout)
	}
	defer func() {
		for _, g := range gs {
			g.Stop()
		}
	}()
	allDone := make(chan struct{})
	go func() {
		for _, s := range shards {
			select {
			case <-copies[s].AllDone():
			case <-sctx.Done():
				return
			}
		}
		close(allDone)
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("ps %d: grpc server: %w", me, err)
	case <-allDone:
		cfg.Logf("every worker has finished; shutting down")
		time.Sleep(rc.FailoverTimeout / 2) // let the last acknowledgements reach the copies
		return nil
	case <-removed:
		return fmt.Errorf("ps %d was removed from the cluster (its shards failed over to their copies); exiting without serving", me)
	case <-ctx.Done():
		st, _ := copies[me].Server.Status(context.Background(), &pb.StatusRequest{})
		return &StoppedError{Task: me, Cause: context.Cause(ctx), Step: st.GetGlobalStep(), Done: int(st.GetWorkersDone()), Workers: len(cfg.Cluster.Spec.Workers)}
	}
}

// reopenable is a listener that can stop listening for a while (pause:
// connections are refused) and listen again at the same address (resume),
// while its Accept simply waits: the ps address of a ps that rejoins,
// whose own shard is served by another copy meanwhile.
type reopenable struct {
	addr   string
	listen func(string) (net.Listener, error)
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once

	mu  sync.Mutex
	cur net.Listener
	at  net.Addr
}

func openReopenable(addr string, listen func(string) (net.Listener, error)) (*reopenable, error) {
	r := &reopenable{addr: addr, listen: listen, conns: make(chan net.Conn), done: make(chan struct{})}
	return r, r.resume()
}

func (r *reopenable) resume() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != nil {
		return nil
	}
	select {
	case <-r.done:
		return net.ErrClosed
	default:
	}
	l, err := r.listen(r.addr)
	if err != nil {
		return err
	}
	r.cur, r.at = l, l.Addr()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case r.conns <- c:
			case <-r.done:
				c.Close()
				return
			}
		}
	}()
	return nil
}

func (r *reopenable) pause() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != nil {
		r.cur.Close()
		r.cur = nil
	}
}

func (r *reopenable) paused() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur == nil
}

func (r *reopenable) Accept() (net.Conn, error) {
	select {
	case c := <-r.conns:
		return c, nil
	case <-r.done:
		return nil, net.ErrClosed
	}
}

func (r *reopenable) Close() error {
	r.once.Do(func() { close(r.done) })
	r.pause()
	return nil
}

func (r *reopenable) Addr() net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at
}

// waitPeers waits until every ps's replication address accepts a
// connection, for at most --startup_timeout. It checks the port only, with
// a plain TCP connection that sends nothing: a handshake (--tls_dir) would
// wait for the peer's replication to start, which waits for this check.
func waitPeers(ctx context.Context, cfg Config, addrs []string) error {
	var d net.Dialer
	dial := func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }
	deadline := time.Now().Add(cfg.StartupTimeout)
	for i, a := range addrs {
		for {
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			c, err := dial(dctx, a)
			cancel()
			if err == nil {
				c.Close()
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("ps %d: ps %d's replication address %s did not answer within --startup_timeout=%s: %v", cfg.Cluster.Task.Index, i, a, cfg.StartupTimeout, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// failoverDial is a worker's dialler under --replicas: the connection for
// ps s goes to the first copy of shard s that accepts it; a later copy is
// tried only once the earlier have refused for the failover timeout. A
// copy reached while its primary lives (a ps slow to start) answers
// Unavailable after three timeouts and drops the connection, and the next
// dial tries the primary first again.
func failoverDial(cfg Config) func(ctx context.Context, addr string) (net.Conn, error) {
	rc := cfg.Replication
	base := cfg.Dial
	if base == nil {
		var d net.Dialer
		base = func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }
	}
	byAddr := map[string][]string{}
	for s, a := range cfg.Cluster.Spec.PS {
		byAddr[a] = rc.copies(s, cfg.Cluster.Spec.PS)
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
			dctx, cancel := context.WithTimeout(ctx, rc.FailoverTimeout)
			c, err := base(dctx, a)
			cancel()
			mu.Lock()
			if err == nil {
				delete(failingSince, a)
				mu.Unlock()
				if i > 0 {
					cfg.Logf("worker %d: shard %d: connected to its copy at %s (earlier copies do not answer)", cfg.Cluster.Task.Index, indexOf(cfg.Cluster.Spec.PS, addr), a)
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
				if err := sleepCtx(ctx, time.Until(t.Add(rc.FailoverTimeout))); err != nil {
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

// replicatedWorker prepares a worker's config for replicated shards:
// connections that fail over, and pulls that are not incremental (a copy
// that takes over holds other row versions than the ones the worker was
// told).
func replicatedWorker(cfg *Config, sparse bool) error {
	if !cfg.Replication.Enabled() {
		return nil
	}
	if sparse && cfg.IncrementalPull {
		return &ConfigError{Err: fmt.Errorf("--replicas=%d with --incremental_pull: replicated shards answer full pulls only (a copy that takes over numbers its row versions afresh); drop --incremental_pull", cfg.Replication.Replicas)}
	}
	if err := cfg.Replication.Check(len(cfg.Cluster.Spec.PS)); err != nil {
		return &ConfigError{Err: err}
	}
	cfg.Dial = failoverDial(*cfg)
	return nil
}

func shardLogf(logf func(string, ...any), s int) func(string, ...any) {
	return func(format string, args ...any) { logf("shard %d: "+format, append([]any{s}, args...)...) }
}

// resendAfterFailover sends a step's push and pull again, the same
// gradients with the same request id, while the copies of a lost ps's
// shards take over: a shard that applied the push recognises the resend,
// the others apply it, so the step is applied once everywhere, as in the
// job undisturbed. It gives up after --recovery_timeout, or on an error
// no failover cures, returning the last error to the usual recovery.
func resendAfterFailover(ctx context.Context, cfg Config, step int64, err error, send func(context.Context) (int64, error)) (int64, error) {
	start := time.Now()
	// One resend may itself wait (a copy holding the push unacknowledged):
	// the bound covers it too, not only the loop.
	bound := fmt.Errorf("--recovery_timeout=%s passed while step %d was sent again to the shards' copies", cfg.RecoveryTimeout, step)
	rctx, cancel := context.WithDeadlineCause(ctx, start.Add(cfg.RecoveryTimeout), bound)
	defer cancel()
	lastLog := time.Time{}
	var restarted *client.RestartedError // a ps restored a checkpoint (the cluster re-formed): the usual recovery
	for err != nil && retryable(err) && !errors.As(err, &restarted) && ctx.Err() == nil && time.Since(start) < cfg.RecoveryTimeout {
		if time.Since(lastLog) >= cfg.WaitLogEvery {
			cfg.Logf("worker %d: at global step %d: %v; sending the step again while the shards fail over", cfg.Cluster.Task.Index, step, err)
			lastLog = time.Now()
		}
		if serr := sleepCtx(rctx, 20*time.Millisecond); serr != nil {
			break
		}
		s, serr := send(rctx)
		if serr == nil {
			cfg.Logf("worker %d: step %d acknowledged after failover, %s after the first failure", cfg.Cluster.Task.Index, step, time.Since(start).Round(time.Millisecond))
			return s, nil
		}
		if ctx.Err() == nil && rctx.Err() != nil {
			// The bound cut this resend short: the last failover error goes
			// to the usual recovery, as when the loop runs out of time.
			cfg.Logf("worker %d: %v", cfg.Cluster.Task.Index, context.Cause(rctx))
			return step, err
		}
		err = serr
	}
	return step, err
}
