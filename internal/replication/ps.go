package replication

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/replica"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// PSConfig configures one ps of a job with replicated shards (RunPS).
type PSConfig struct {
	Options
	// Cluster is the job's cluster and this ps's task in it.
	Cluster cluster.Config
	// CheckpointDir is where the ps's copies restore from at start and at
	// a re-formation, and where the primaries write (--checkpoint_dir).
	CheckpointDir string
	// StartupTimeout bounds the wait for every ps's replication address
	// (--startup_timeout; 5m if 0).
	StartupTimeout time.Duration
	// WaitLogEvery is how often a wait logs what it waits for (the
	// servers' --wait_log_every).
	WaitLogEvery time.Duration
	// MaxTableKeys, if positive, caps the keys each sparse table holds on
	// each copy (server.Config.MaxTableKeys).
	MaxTableKeys int
	// Tiers, if set, gives each copy of a shard this ps holds a second
	// tier for its sparse tables (--table_memory: server.Config.Tiers):
	// it is called once per copy, with the shard and the number of copies
	// this ps holds, before the copy's server is made. run starts the
	// tier's background work once the server exists, until ctx ends or
	// the returned stop is called; a tier that fails calls fail, which
	// ends RunPS with the error (restart the ps: it rejoins and is copied
	// anew).
	Tiers func(shard, copies int) (tiers shard.Tiers, run TierRun, err error)
	// Logf receives every log line; nil discards them.
	Logf func(format string, args ...any)
	// Listen and Dial, if set, replace TCP for the ps's addresses and its
	// connections to the other ps (the transport seam of tests).
	Listen func(addr string) (net.Listener, error)
	Dial   func(ctx context.Context, addr string) (net.Conn, error)
	// Ended, if set, is the ps's watch over its workers: it is asked once
	// a second, with this ps's copy of its own shard, whether the job has
	// ended though not every worker called Done. Every copy knows what
	// the primaries know of the workers: Done and a worker's word that it
	// gave up go through the shard's log, and each primary logs when it
	// last heard from each worker (server.EncodeHeard), so every ps judges
	// alike, a ps started again too. ended with a nil error ends RunPS
	// with nil (the job succeeded); an error is the ps giving up: every
	// copy on this ps answers the workers with it (server.Server.GiveUp)
	// for GiveUpGrace, then RunPS ends with it.
	Ended func(s *server.Server) (ended bool, err error)
}

// GiveUpGrace is how long a ps that gave up on the job keeps answering
// its workers with the reason before it exits: a waiting pull reads it at
// once, a worker between calls at its next one.
const GiveUpGrace = 2 * time.Second

// heardEvery is how often the primary of a shard logs when it last heard
// from each worker (tellHeard).
const heardEvery = time.Second

// Defaults fills in the zero fields of c that have a default: Logf
// discards, StartupTimeout is 5 minutes, WaitLogEvery 5 seconds.
func (c *PSConfig) Defaults() {
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.StartupTimeout <= 0 {
		c.StartupTimeout = 5 * time.Minute
	}
	if c.WaitLogEvery <= 0 {
		c.WaitLogEvery = 5 * time.Second
	}
}

func (c *PSConfig) defaults() {
	c.Defaults()
	if c.Listen == nil {
		c.Listen = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
}

// TierRun starts a copy's second tier's background work (PSConfig.Tiers).
type TierRun func(ctx context.Context, s *server.Server, fail func(error)) (stop func() error)

// replicatedPS is one ps under --replicas: its copies of the shards it
// holds, the host that replicates them, and the listeners they serve on.
// Its fields are set by RunPS before anything runs, then only read.
type replicatedPS struct {
	cfg       PSConfig
	n, me     int
	shards    []int // the shards this ps holds a copy of, its own first
	replAddrs []string
	copies    map[int]*shardCopy
	tierRuns  map[int]TierRun // each copy's tier's background work (PSConfig.Tiers)
	tierErr   chan error      // a tier that failed
	incs      map[int]*incarnations
	host      *Host
	own       *reopenable // this ps's address: its own shard's copy
	lis       []net.Listener

	joining     chan struct{} // one token: the host found this ps started again
	removed     chan struct{} // closed once the host stopped: this ps was removed
	removedOnce sync.Once
}

// RunPS is a ps with --replicas > 1 (docs/REPLICATION.md): it serves its
// own shard and a copy of each of the Replicas-1 shards before it, each at
// its own address, and replicates them through a Host, until every worker
// is done or ctx ends (a *server.StoppedError). A ps that learns it was removed
// exits with an error; `paramserv local` starts it again, and it rejoins
// as a new copy of its shards (re-replication).
func RunPS(ctx context.Context, cfg PSConfig) error {
	cfg.defaults()
	floor := holdGCFloor()
	defer runtime.KeepAlive(floor)
	n := len(cfg.Cluster.Spec.PS)
	if err := cfg.Check(n); err != nil {
		return &ConfigError{Err: err}
	}
	p := &replicatedPS{
		cfg: cfg, n: n, me: cfg.Cluster.Task.Index, replAddrs: cfg.replAddrs(n),
		shards: replica.Shards(cfg.Cluster.Task.Index, n, cfg.Replicas),
		copies: map[int]*shardCopy{}, incs: map[int]*incarnations{},
		tierRuns: map[int]TierRun{}, tierErr: make(chan error, 1),
		joining: make(chan struct{}, 1), removed: make(chan struct{}),
	}
	defer func() {
		for _, l := range p.lis {
			l.Close()
		}
	}()
	replLis, err := p.open(p.replAddrs[p.me])
	if err != nil {
		return err
	}
	if err := p.newCopies(); err != nil {
		return err
	}
	tctx, stopTiers := context.WithCancel(ctx)
	defer stopTiers()
	for _, s := range p.shards {
		if run := p.tierRuns[s]; run != nil {
			stop := run(tctx, p.copies[s].Server, func(err error) {
				select {
				case p.tierErr <- err:
				default:
				}
			})
			defer stop()
		}
	}
	// Start the node only once every peer listens, so that a slow start is
	// not taken for a silence.
	if err := waitPeers(ctx, cfg, p.replAddrs); err != nil {
		return err
	}
	if p.host, err = Start(p.hostConfig(replLis)); err != nil {
		return err
	}
	defer p.host.Close()
	stopApply := make(chan struct{})
	defer close(stopApply)
	for _, c := range p.copies {
		go c.applier.run(stopApply)
	}
	for _, c := range p.copies {
		c.host = p.host
	}
	if p.own, err = openReopenable(cfg.Cluster.Addr(), cfg.Listen); err != nil {
		return &ConfigError{Err: &server.ListenError{Addr: cfg.Cluster.Addr(), Err: err}}
	}
	defer p.own.Close()
	go p.watchMembership(ctx)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(p.shards))
	stop, err := p.serve(errc)
	defer stop()
	if err != nil {
		return err
	}
	go p.tellHeard(sctx)
	return p.wait(ctx, sctx, errc)
}

// open listens at addr, closed when RunPS returns.
func (p *replicatedPS) open(addr string) (net.Listener, error) {
	l, err := p.cfg.Listen(addr)
	if err != nil {
		return nil, &ConfigError{Err: &server.ListenError{Addr: addr, Err: err}}
	}
	p.lis = append(p.lis, l)
	return l, nil
}

// newCopies makes this ps's copy of each shard it holds, each restored
// from the newest checkpoint.
func (p *replicatedPS) newCopies() error {
	cfg := p.cfg
	for _, s := range p.shards {
		p.incs[s] = newIncarnations(cfg.Cluster.Spec.PS, s)
		c := newShardCopy(s, p.me, cfg.FailoverTimeout)
		var tiers shard.Tiers
		if cfg.Tiers != nil {
			var err error
			if tiers, p.tierRuns[s], err = cfg.Tiers(s, len(p.shards)); err != nil {
				return err
			}
		}
		c.Server = server.New(server.Config{
			Task: s, NumPS: p.n, NumWorkers: len(cfg.Cluster.Spec.Workers), Logf: shardLogf(cfg.Logf, s),
			WaitLogEvery: cfg.WaitLogEvery, CheckpointDir: cfg.CheckpointDir, Incarnation: p.incs[s].next,
			Replicated:   c, // the data path's pushes go through the shard's log
			Aggregated:   c.aggregated,
			MaxTableKeys: cfg.MaxTableKeys,
			Tiers:        tiers,
		})
		c.fsm = server.NewFSM(c.Server, p.me)
		c.logf = shardLogf(cfg.Logf, s)
		c.applier = newApplier(c.apply)
		p.copies[s] = c
		if _, err := c.RestoreLatest(); err != nil {
			return fmt.Errorf("ps %d: restoring shard %d from %s: %w", p.me, s, cfg.CheckpointDir, err)
		}
	}
	return nil
}

// hostConfig is the configuration of this ps's Host: its callbacks reach
// the copies.
func (p *replicatedPS) hostConfig(l net.Listener) HostConfig {
	cfg := p.cfg
	return HostConfig{
		Config: replica.Config{ID: p.me, N: p.n, R: cfg.Replicas, Timeout: cfg.FailoverTimeout},
		Addrs:  p.replAddrs, Listener: l, Dial: cfg.Dial,
		Apply: func(e replica.Entry) {
			if c := p.copies[e.Shard]; c != nil {
				c.applier.add(e)
			}
		},
		Snapshot: func(s int) ([]byte, error) {
			if c := p.copies[s]; c != nil {
				c.drainApplier() // the snapshot is taken at the seq handed out last
				return c.fsm.Snapshot()
			}
			return nil, fmt.Errorf("ps %d holds no copy of shard %d", p.me, s)
		},
		SnapshotCut: func(s int) (func() ([]byte, error), func(), error) {
			if c := p.copies[s]; c != nil {
				c.drainApplier() // the cut is taken at the seq handed out last
				cut := c.Server.CutCopy()
				return cut.Encode, cut.Release, nil
			}
			return nil, nil, fmt.Errorf("ps %d holds no copy of shard %d", p.me, s)
		},
		Install: func(s int, b []byte) error {
			if c := p.copies[s]; c != nil {
				c.drainApplier() // nothing older lands on top of the copy
				if err := c.fsm.Restore(b); err != nil {
					return err
				}
				p.incs[s].follow(c.Server.Incarnation())
				return nil
			}
			return fmt.Errorf("ps %d holds no copy of shard %d", p.me, s)
		},
		Reformed: p.reformed,
		Joining: func() { // on the host's loop: the work is done in watchMembership
			select {
			case p.joining <- struct{}{}:
			default:
			}
		},
		TookOver: p.tookOver,
		Lost: func(ss []int) {
			cfg.Logf("ps %d: every copy of shards %v is lost: the job cannot go on without them; the workers give up after --recovery_timeout, and a new job restores the last checkpoint", p.me, ss)
		},
		Logf: cfg.Logf,
	}
}

// reformed is told the cluster re-formed (Config.Reformed): every copy
// falls back to the newest checkpoint.
func (p *replicatedPS) reformed(r replica.Reform) {
	cfg := p.cfg
	before, after := int64(-1), int64(-1)
	for _, s := range p.shards {
		c := p.copies[s]
		st, _ := c.Server.Status(context.Background(), &pb.StatusRequest{})
		before = max(before, st.GetGlobalStep())
		p.incs[s].newEpoch(r.Epoch)
		c.drainApplier() // nothing of the old epoch lands on the restored state
		ok, err := c.RestoreLatest()
		switch {
		case err != nil:
			cfg.Logf("ps %d: shard %d: restoring the newest checkpoint of %s: %v", p.me, s, cfg.CheckpointDir, err)
		case !ok:
			cfg.Logf("ps %d: shard %d: no checkpoint in %q to fall back to: the job cannot go on (run with --checkpoint_dir and --save_steps)", p.me, s, cfg.CheckpointDir)
		default:
			st, _ := c.Server.Status(context.Background(), &pb.StatusRequest{})
			after = st.GetGlobalStep()
		}
	}
	if r.By == p.me {
		for _, s := range r.Lost {
			cfg.Logf("ps %d: every copy of shard %d lost (ps %s); falling back to the checkpoint of step %d; %d steps lost", p.me, s, andList(replica.Members(s, p.n, cfg.Replicas)), after, max(0, before-after))
		}
	} else {
		cfg.Logf("ps %d: the cluster re-formed (by ps %d) from the checkpoint of step %d (this ps was at step %d)", p.me, r.By, after, before)
	}
}

// tookOver logs the shards this ps now serves as primary, once their
// entries are applied (Config.TookOver).
func (p *replicatedPS) tookOver(ss []int) {
	for _, s := range ss {
		c := p.copies[s]
		_ = c.applier.wait(context.Background(), c.applier.mark())
		st, _ := c.Server.Status(context.Background(), &pb.StatusRequest{})
		p.cfg.Logf("ps %d took over shard %d at global step %d (failover)", p.me, s, st.GetGlobalStep())
	}
}

// watchMembership follows what the host learns of this ps until ctx ends:
// a ps started again while the job runs stops serving its own shard at
// its address until it serves it again, and a removed ps stops for good.
func (p *replicatedPS) watchMembership(ctx context.Context) {
	cfg := p.cfg
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.joining:
			// Started again: the others know this ps as its old
			// process. Its own shard has another primary now, so it
			// refuses the workers at its address (their dialler then
			// goes on to the copy that serves) until it serves it again.
			cfg.Logf("ps %d: started again while the job runs: rejoining as a new copy of shards %v (they are copied from their primaries)", p.me, p.shards)
			p.own.pause()
			p.copies[p.me].dropConns()
		case <-time.After(cfg.FailoverTimeout / 4):
		}
		if p.host.Stopped() {
			p.removedOnce.Do(func() { close(p.removed) })
			return
		}
		if p.own.paused() && p.host.Primary(p.me) == p.me && !p.host.Joining() {
			if err := p.own.resume(); err != nil {
				cfg.Logf("ps %d: listening again at %s for shard %d: %v", p.me, cfg.Cluster.Addr(), p.me, err)
			}
		}
	}
}

// serve serves each copy over gRPC and the data path at its address (the
// ps's own shard at its ps address), sending each gRPC server's end to
// errc. stop stops what it started.
func (p *replicatedPS) serve(errc chan<- error) (stop func(), err error) {
	var gs []*grpc.Server
	var stopMuxes []func()
	stop = func() {
		for _, g := range gs {
			g.Stop()
		}
		for i := len(stopMuxes) - 1; i >= 0; i-- {
			stopMuxes[i]()
		}
	}
	for _, s := range p.shards {
		var l net.Listener = p.own
		if s != p.me {
			if l, err = p.open(p.cfg.copyAddr(p.me, s, p.n)); err != nil {
				return stop, err
			}
		}
		c := p.copies[s]
		g := c.NewGRPC(c)
		gs = append(gs, g)
		// gRPC and the data path share the address, as on a ps without
		// replicas.
		gl, stopMux := c.Mux(c.accepted(l))
		stopMuxes = append(stopMuxes, stopMux)
		go func() { errc <- g.Serve(gl) }()
		p.cfg.Logf("ps %d: serving shard %d on %s (%d copies, failover after %s)", p.me, s, l.Addr(), p.cfg.Replicas, p.cfg.FailoverTimeout)
	}
	return stop, nil
}

// wait waits until every worker is done, a gRPC server fails, this ps is
// removed or ctx ends, and says which.
func (p *replicatedPS) wait(ctx, sctx context.Context, errc <-chan error) error {
	allDone := make(chan struct{})
	go func() {
		for _, s := range p.shards {
			select {
			case <-p.copies[s].AllDone():
			case <-sctx.Done():
				return
			}
		}
		close(allDone)
	}()
	ended := make(chan error, 1)
	if p.cfg.Ended != nil {
		go func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-sctx.Done():
					return
				case <-tick.C:
				}
				if end, err := p.cfg.Ended(p.copies[p.me].Server); end || err != nil {
					ended <- err
					return
				}
			}
		}()
	}
	select {
	case err := <-errc:
		return fmt.Errorf("ps %d: grpc server: %w", p.me, err)
	case err := <-ended:
		if err == nil {
			return nil // the job succeeded (Ended said so)
		}
		// The workers waiting on this ps's copies read why it gives up
		// (and stop, naming it) rather than fail over to the copies of
		// a ps that is gone.
		for _, s := range p.shards {
			p.copies[s].giveUp(err)
		}
		p.cfg.Logf("%v; answering the workers with it for %s before exiting", err, GiveUpGrace)
		select {
		case <-time.After(GiveUpGrace):
		case <-ctx.Done():
		}
		return err
	case err := <-p.tierErr:
		return err
	case <-allDone:
		p.cfg.Logf("every worker has finished; shutting down")
		time.Sleep(p.cfg.FailoverTimeout / 2) // let the last acknowledgements reach the copies
		return nil
	case <-p.removed:
		return fmt.Errorf("ps %d was removed from the cluster (its shards failed over to their copies); exiting without serving", p.me)
	case <-ctx.Done():
		st, _ := p.copies[p.me].Server.Status(context.Background(), &pb.StatusRequest{})
		return &server.StoppedError{Task: p.me, Cause: context.Cause(ctx), Step: st.GetGlobalStep(), Done: int(st.GetWorkersDone()), Workers: len(p.cfg.Cluster.Spec.Workers)}
	}
}

// tellHeard logs, every heardEvery until ctx ends, into the log of each
// shard this ps serves as primary, when it last heard from each worker
// (server.EncodeHeard): its backups hear a worker's pulls and Status
// calls, and a synchronous worker's pushes, only so. The entry holds every
// worker heard from, not only those heard since the last one, so that a
// copy that joined since (a ps started again) learns them all. A shard
// that cannot take it now (a failover) is skipped until the next tick.
func (p *replicatedPS) tellHeard(ctx context.Context) {
	tick := time.NewTicker(heardEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, s := range p.shards {
			if p.host.Primary(s) != p.me || !p.host.Proposable(s) {
				continue
			}
			_, seen := p.copies[s].WorkerActivity()
			if len(seen) == 0 {
				continue
			}
			now := time.Now()
			ago := make(map[int]time.Duration, len(seen))
			for w, t := range seen {
				ago[w] = now.Sub(t)
			}
			pctx, cancel := context.WithTimeout(ctx, heardEvery)
			_ = p.host.PushIf(pctx, s, timeID(heardClient+p.me), server.EncodeHeard(p.me, ago), nil) // the next tick tells it again
			cancel()
		}
	}
}

// waitPeers waits until every ps's replication address accepts a
// connection, for at most --startup_timeout. It checks the port only, with
// a plain TCP connection that sends nothing: a handshake (--tls_dir) would
// wait for the peer's replication to start, which waits for this check.
func waitPeers(ctx context.Context, cfg PSConfig, addrs []string) error {
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

func shardLogf(logf func(string, ...any), s int) func(string, ...any) {
	return func(format string, args ...any) { logf("shard %d: "+format, append([]any{s}, args...)...) }
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
