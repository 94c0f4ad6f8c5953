package replication

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paramserv/paramserv/internal/replica"
)

// MaxFrame bounds one message on the wire (a push's bytes plus headers).
const MaxFrame = 1 << 30

// MaxDirect is the largest message written to a peer by the goroutine
// that made it, once it let go of the host's lock, rather than handed to
// the peer's sender goroutine (one wake-up less on the path of a push): an
// acknowledgement, a heartbeat, a small shard's push. A push's own entry
// is written so whatever its size, by the pushing call (Push), and so is a
// synchronous step's aggregate (Aggregate). A message is
// written so only when nothing is queued to or being written to that peer
// (so messages keep their order), and only on a connection already open;
// anything else goes through the sender. Only small messages are written
// by the goroutines that read the peers, so that two ps whose buffers are
// full never wait for each other's reader.
const MaxDirect = 64 << 10

// MaxQueued bounds the bytes waiting to be sent to one peer; a message
// beyond it is dropped (the protocol sends it again once the peer keeps up).
const MaxQueued = 256 << 20

// HostConfig configures one ps's Host.
type HostConfig struct {
	replica.Config
	// Addrs are the replication addresses of the ps, by index.
	Addrs []string
	// Listener accepts the other ps's connections (at Addrs[ID]).
	Listener net.Listener
	// Dial connects to another ps (net.Dialer's if nil).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Apply applies a log entry to this ps's copy of its shard, in order.
	Apply func(e replica.Entry)
	// TookOver is told the shards this ps now serves as primary, after
	// their entries were applied; nil logs them.
	TookOver func(shards []int)
	// Lost is told the shards with no copy left; nil logs them.
	Lost func(shards []int)
	// Snapshot returns this ps's copy of a shard as it is now (after every
	// entry applied), for a ps that rejoins; Install replaces this ps's
	// copy by one another ps's Snapshot made. Without them a rejoining ps
	// gets no copy from this one (and never counts again).
	Snapshot func(shard int) ([]byte, error)
	Install  func(shard int, data []byte) error
	// SnapshotCut, if set, is used instead of Snapshot: it takes the
	// copy's cut under the same conditions (the host's lock held), and
	// encode builds its bytes after, with no lock held, while the shard
	// moves on (the node keeps the entries since for the rejoining ps);
	// release lets go of the cut.
	SnapshotCut func(shard int) (encode func() ([]byte, error), release func(), err error)
	// Reformed is told that the cluster re-formed (replica.Reform): every
	// copy of this ps must fall back to the newest checkpoint now, before
	// anything else is applied. Pushes waiting get replica.ErrReformed.
	Reformed func(r replica.Reform)
	// Joining is told that this process is not the member the others know
	// (a ps started again): it holds nothing until readmitted and copied.
	Joining func()
	// Logf receives log lines; nil discards them.
	Logf func(format string, args ...any)
	// TickEvery is how often the node ticks (Timeout/10 if 0).
	TickEvery time.Duration
}

// Host runs one ps's replica.Node: it ticks the node on a real clock,
// carries its messages to the other ps over connections (TCP, or memnet in
// tests) in the wire form of replica.Message, hands its entries to
// HostConfig.Apply, and blocks a push until it is acknowledged. Create it with
// Start.
//
// Concurrency: the Node is owned by whoever holds the host's lock (mu):
// the goroutine that reads a peer's message steps the node with it, a
// push proposes itself, a ticker goroutine ticks it, each then doing what
// the node's Ready asks before letting go. No message, push or query waits
// for a hand-off to another goroutine (on a loaded machine each hand-off
// is a wake-up that can wait for a core). Apply and TookOver are called
// with the lock held, in log order, so they must not call the host. Each
// peer has a sender goroutine (dialling on demand, dropping what it cannot
// send: the protocol sends again) and each accepted connection a reader
// goroutine. Close stops them all.
//
// A message counts only as the ps its connection is from (Node.StepFrom):
// under TLS the ps whose certificate the peer proved (a worker's
// certificate is closed at once); otherwise the ps the connection's first
// message claims, if no other open connection claimed it first. Without
// TLS that is no proof: a token keeps out those without it, but anyone
// with the token, or anyone at all in plain mode, can claim a ps that is
// not connected (docs/SECURITY.md).
type Host struct {
	cfg     HostConfig
	quit    chan struct{}
	wg      sync.WaitGroup
	peers   []chan [][]byte
	queued  []atomic.Int64 // per peer: bytes in peers[id] or being written
	out     []peerConn     // per peer: the connection the sender writes
	connsMu sync.Mutex
	conns   map[net.Conn]bool
	// registered: without TLS, the connection each ps's messages come
	// over, the first that claimed it, while it is open.
	registered map[int]net.Conn
	stopOnce   sync.Once

	mu      sync.Mutex // owns what follows
	closed  bool
	node    *replica.Node
	waiting map[ackKey][]chan error
	serving map[int][]chan struct{} // WaitServing's waiters, by shard

	// Messages to write once the lock is let go (unlock), and the peers
	// whose connection this holder took for them.
	direct    []directMsg
	held      []int
	maxDirect int64 // for this holder: MaxDirect, or any size for Push
	// noSnapshots: this holder is Aggregate, called with the shard's lock
	// held, so it must not take a copy of the shard (Snapshot reads it
	// under that lock): the node asks again later (a heartbeat, an
	// acknowledgement), from a goroutine that holds no shard.
	noSnapshots   bool
	snapshotLater bool // a copy was not taken under noSnapshots

	// Re-replication.
	admittedAt time.Time
	installed  map[int]int64 // per shard: bytes of the copies installed
}

// peerConn is the connection to one peer: its sender goroutine dials and
// writes it; a direct write (MaxDirect) takes mu without waiting.
type peerConn struct {
	mu   sync.Mutex
	conn net.Conn
}

type directMsg struct {
	to   int
	b    [][]byte
	size int64
}

type ackKey struct {
	shard int
	req   replica.ReqID
}

// Start starts the ticker, the listener's accept loop and the senders.
func Start(cfg HostConfig) (*Host, error) {
	if cfg.Boot == 0 {
		cfg.Boot = uint64(time.Now().UnixNano())
	}
	node, err := replica.New(cfg.Config)
	if err != nil {
		return nil, err
	}
	if len(cfg.Addrs) != cfg.N {
		return nil, fmt.Errorf("replicate: %d addresses for %d ps", len(cfg.Addrs), cfg.N)
	}
	if cfg.Apply == nil || cfg.Listener == nil {
		return nil, errors.New("replication: HostConfig.Apply and HostConfig.Listener are required")
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	if cfg.TickEvery <= 0 {
		cfg.TickEvery = cfg.Timeout / 10
	}
	if cfg.TookOver == nil {
		cfg.TookOver = func(s []int) { cfg.Logf("ps %d took over shards %v", cfg.ID, s) }
	}
	if cfg.Lost == nil {
		cfg.Lost = func(s []int) {
			cfg.Logf("ps %d: every copy of shards %v is lost: falling back to checkpoint recovery", cfg.ID, s)
		}
	}
	h := &Host{
		cfg: cfg, node: node, quit: make(chan struct{}), peers: make([]chan [][]byte, cfg.N), queued: make([]atomic.Int64, cfg.N), out: make([]peerConn, cfg.N),
		waiting: map[ackKey][]chan error{}, serving: map[int][]chan struct{}{}, conns: map[net.Conn]bool{}, installed: map[int]int64{},
	}
	for id := range h.peers {
		if id == cfg.ID {
			continue
		}
		h.peers[id] = make(chan [][]byte, 1024)
		h.wg.Add(1)
		go h.send(id)
	}
	h.lock()
	h.node.Tick(time.Now())
	h.drain()
	h.unlock()
	h.wg.Add(2)
	go h.accept()
	go h.tick()
	return h, nil
}

// Close stops every goroutine and closes the listener and connections; a
// push waiting for its acknowledgement gets net.ErrClosed.
func (h *Host) Close() error {
	h.stopOnce.Do(func() {
		close(h.quit)
		h.mu.Lock()
		h.closed = true
		for k, ws := range h.waiting {
			for _, w := range ws {
				w <- net.ErrClosed
			}
			delete(h.waiting, k)
		}
		h.mu.Unlock()
		h.cfg.Listener.Close()
		h.connsMu.Lock()
		for c := range h.conns {
			c.Close()
		}
		h.connsMu.Unlock()
	})
	h.wg.Wait()
	return nil
}

// Push offers a push to shard s and waits until every live copy holds it
// (nil), the node refuses it (replica's errors, such as a
// *replica.NotPrimaryError naming the primary), or ctx ends. A retry with
// the same request id after a failover is recognised, not applied again.
func (h *Host) Push(ctx context.Context, s int, req replica.ReqID, data []byte) error {
	return h.PushIf(ctx, s, req, data, nil)
}

// PushIf is Push with a precondition: ok, if not nil, is asked with the
// host's lock held, just before the push is logged, and its error refuses
// the push unlogged. A re-formation restores the copies under the same
// lock (HostConfig.Reformed), so what ok sees of the node's epoch holds
// when the push is logged.
func (h *Host) PushIf(ctx context.Context, s int, req replica.ReqID, data []byte, ok func(*replica.Node) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	h.lock()
	if h.closed {
		h.unlock()
		return net.ErrClosed
	}
	if ok != nil {
		if err := ok(h.node); err != nil {
			h.unlock()
			return err
		}
	}
	if _, _, err := h.node.Propose(s, req, data); err != nil {
		h.unlock()
		return err
	}
	k := ackKey{s, req}
	h.waiting[k] = append(h.waiting[k], done)
	h.maxDirect = MaxFrame // its entry goes out from here, whatever its size
	h.drain()
	h.unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Hold is Push for a synchronous step replicated by aggregate
// (replica.Node.Hold): if dup is false the caller applies the push to its
// own copy, and when the step completes calls Aggregate. wait blocks until
// the step holding the push is held by every live copy.
func (h *Host) Hold(s int, req replica.ReqID) (dup bool, wait func(context.Context) error, err error) {
	done := make(chan error, 1)
	if !h.do(func(n *replica.Node) {
		if dup, err = n.Hold(s, req); err == nil {
			k := ackKey{s, req}
			h.waiting[k] = append(h.waiting[k], done)
		}
	}) {
		return false, nil, net.ErrClosed
	}
	if err != nil {
		return false, nil, err
	}
	return dup, func(ctx context.Context) error {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil
}

// Aggregate logs a completed step's aggregate, data, covering the pushes
// held since the last (replica.Node.ProposeHeld), and ships it.
// The entry goes out from the calling goroutine, as a push's does.
func (h *Host) Aggregate(s int, data []byte) error {
	h.lock()
	defer h.unlock()
	if h.closed {
		return net.ErrClosed
	}
	h.maxDirect = MaxFrame
	_, err := h.node.ProposeHeld(s, data)
	h.noSnapshots = true
	h.drain()
	h.noSnapshots = false
	if h.snapshotLater {
		// Ask again at once from a goroutine that holds no shard: it takes
		// the copy once the caller let go of the shard's lock, unless the
		// next step's pushes came first (then a heartbeat asks again).
		h.snapshotLater = false
		h.wg.Add(1) // before Close can wait: it sets closed under mu
		go func() {
			defer h.wg.Done()
			h.do(func(n *replica.Node) { n.AskSnapshots(s) })
		}()
	}
	return err
}

// Serving reports whether this ps may answer pulls of shard s now.
func (h *Host) Serving(s int) bool {
	var ok bool
	h.query(func(n *replica.Node) { ok = n.Serving(s) })
	return ok
}

// Proposable reports whether Push would take a push for shard s now
// (replica.Node.Proposable): a push need not wait for the pushes before
// it to be held by every copy, as a pull does (WaitServing).
func (h *Host) Proposable(s int) bool {
	var ok bool
	h.query(func(n *replica.Node) { ok = n.Proposable(s) })
	return ok
}

// WaitServing waits until this ps may answer pulls of shard s (Serving),
// ctx ends (its error) or the host closes (net.ErrClosed). It is woken as
// soon as that holds (by what changed the node), not by polling.
func (h *Host) WaitServing(ctx context.Context, s int) error {
	var ch chan struct{}
	if !h.do(func(n *replica.Node) {
		if !n.Serving(s) {
			ch = make(chan struct{})
			h.serving[s] = append(h.serving[s], ch)
		}
	}) {
		return net.ErrClosed
	}
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-h.quit:
		return net.ErrClosed
	}
}

// Stopped reports whether this ps learnt it was removed for good.
func (h *Host) Stopped() bool {
	var ok bool
	h.query(func(n *replica.Node) { ok = n.Stopped() })
	return ok
}

// Joining reports whether this process waits to be readmitted (it is a
// ps started again that the others still know as its old process).
func (h *Host) Joining() bool {
	var ok bool
	h.query(func(n *replica.Node) { ok = n.Joining() })
	return ok
}

// Epoch is the node's (replica.Node.Epoch): it changes when the cluster
// re-forms and every copy restores the newest checkpoint.
func (h *Host) Epoch() uint64 {
	var e uint64
	h.query(func(n *replica.Node) { e = n.Epoch() })
	return e
}

// Primary is the ps this one believes serves shard s (-1: none left).
func (h *Host) Primary(s int) int {
	p := -1
	h.query(func(n *replica.Node) { p = n.Primary(s) })
	return p
}

func (h *Host) query(f func(*replica.Node)) { h.do(f) }

// do runs f with the node, then what the node asks; false if the host is
// closed.
func (h *Host) do(f func(*replica.Node)) bool {
	h.lock()
	defer h.unlock()
	if h.closed {
		return false
	}
	f(h.node)
	h.drain()
	return true
}

// lock takes the host's lock.
func (h *Host) lock() {
	h.mu.Lock()
	h.maxDirect = MaxDirect
}

// unlock lets go of the host's lock, then writes the messages drain left
// to this goroutine (MaxDirect).
func (h *Host) unlock() {
	direct, held := h.direct, h.held
	h.direct, h.held = nil, nil
	h.mu.Unlock()
	for _, d := range direct {
		if pc := &h.out[d.to]; pc.conn != nil {
			h.write(pc, d.b, d.size, h.cfg.Timeout)
		}
	}
	for _, id := range held {
		h.out[id].mu.Unlock()
	}
}

// tick ticks the node every TickEvery until Close.
func (h *Host) tick() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.TickEvery)
	defer t.Stop()
	for {
		select {
		case <-h.quit:
			return
		case <-t.C:
			h.do(func(n *replica.Node) { n.Tick(time.Now()) })
		}
	}
}

// drain does what the node's Ready asks (with mu held).
func (h *Host) drain() {
	rd := h.node.Ready()
	// Send first: a backup's answer and a primary's appends need only
	// the node's log, so the copies apply in parallel, not one after the
	// other (nothing is answered to a worker before its Apply below).
	h.sendMessages(rd.Messages)
	if rd.Reformed != nil {
		if h.cfg.Reformed != nil {
			h.cfg.Reformed(*rd.Reformed)
		}
		for k, ws := range h.waiting {
			for _, w := range ws {
				w <- replica.ErrReformed
			}
			delete(h.waiting, k)
		}
	}
	if rd.Joining && h.cfg.Joining != nil {
		h.cfg.Joining()
	}
	if rd.Admitted {
		h.admittedAt = time.Now()
	}
	for _, e := range rd.Install {
		data, _ := e.Data.([]byte)
		if h.cfg.Install == nil {
			continue
		}
		if err := h.cfg.Install(e.Shard, data); err != nil {
			h.cfg.Logf("ps %d: installing the copy of shard %d at seq %d: %v", h.cfg.ID, e.Shard, e.Seq, err)
			continue
		}
		h.installed[e.Shard] += int64(len(data))
	}
	for _, e := range rd.Apply {
		h.cfg.Apply(e)
	}
	for _, ev := range rd.Events {
		h.cfg.Logf("%s", ev)
	}
	sent := h.sendSnapshots(rd.Snapshots)
	for _, c := range rd.CaughtUp {
		d := time.Since(h.admittedAt)
		copies := 0
		for _, m := range replica.Members(c.Shard, h.cfg.N, h.cfg.R) {
			if !h.node.Removed(m) {
				copies++
			}
		}
		h.cfg.Logf("ps %d: re-replicated shard %d from ps %d: %d bytes in %s (%.3g MB/s), %d copies again", h.cfg.ID, c.Shard, c.From, h.installed[c.Shard], d.Round(time.Millisecond), float64(h.installed[c.Shard])/d.Seconds()/1e6, copies)
	}
	if len(rd.TookOver) > 0 {
		h.cfg.TookOver(rd.TookOver)
	}
	if len(rd.Lost) > 0 {
		h.cfg.Lost(rd.Lost)
	}
	for _, a := range rd.Acked {
		k := ackKey{a.Shard, a.Req}
		for _, w := range h.waiting[k] {
			w <- nil
		}
		delete(h.waiting, k)
	}
	for s, ws := range h.serving {
		if h.node.Serving(s) {
			for _, w := range ws {
				close(w)
			}
			delete(h.serving, s)
		}
	}
	if sent {
		h.drain() // the snapshots' messages
	}
}

// sendMessages writes the node's messages to their peers, or queues them
// for the peers' senders (drain, the host's lock held).
func (h *Host) sendMessages(msgs []replica.Message) {
	for _, m := range msgs {
		b, err := m.AppendBuffers(nil)
		if err != nil {
			h.cfg.Logf("replicate: %v message to ps %d not sent: %v", m.Type, m.To, err)
			continue
		}
		size := int64(0)
		for _, p := range b {
			size += int64(len(p))
		}
		if h.writeDirect(m.To, b, size) {
			continue
		}
		if h.queued[m.To].Load()+size > MaxQueued {
			continue // the peer is slow or gone: the protocol sends again
		}
		h.queued[m.To].Add(size) // before the sender can take it off
		select {
		case h.peers[m.To] <- b:
		default:
			h.queued[m.To].Add(-size)
		}
	}
}

// sendSnapshots takes the copies the node asks for (a ps rejoins) and
// hands them to it to send, or asks again later where no copy may be
// taken now (drain). sent reports whether any went out.
func (h *Host) sendSnapshots(reqs []replica.SnapshotReq) (sent bool) {
	for _, sr := range reqs {
		if h.cfg.Snapshot == nil {
			break
		}
		if h.noSnapshots {
			h.node.SnapshotLater(sr.Shard, sr.To)
			h.snapshotLater = true
			continue
		}
		if h.cfg.SnapshotCut != nil {
			sent = h.cutSnapshot(sr) || sent
			continue
		}
		start := time.Now()
		b, err := h.cfg.Snapshot(sr.Shard)
		if err == nil {
			err = h.node.SendSnapshot(sr.Shard, sr.To, h.node.Applied(sr.Shard), b)
		} else {
			h.node.SnapshotLater(sr.Shard, sr.To) // a heartbeat asks again
		}
		if err != nil {
			h.cfg.Logf("ps %d: a copy of shard %d for ps %d, rejoining: %v", h.cfg.ID, sr.Shard, sr.To, err)
			continue
		}
		sent = true
		h.cfg.Logf("ps %d: sending its copy of shard %d (%d bytes, taken in %s) to ps %d, rejoining", h.cfg.ID, sr.Shard, len(b), time.Since(start).Round(time.Microsecond), sr.To)
	}
	return sent
}

// cutSnapshot takes the copy sr asks for as a cut, under the host's lock
// (held), and builds and sends it from a goroutine of its own, the lock
// taken again only to send: pushes wait for the cut, not for the copy.
// It reports whether it sent anything now (never: the copy goes later).
func (h *Host) cutSnapshot(sr replica.SnapshotReq) bool {
	start := time.Now()
	seq := h.node.Applied(sr.Shard)
	encode, release, err := h.cfg.SnapshotCut(sr.Shard)
	if err == nil {
		if err = h.node.ReserveSnapshot(sr.Shard, sr.To, seq); err != nil {
			release()
		}
	}
	if err != nil {
		h.node.SnapshotLater(sr.Shard, sr.To) // a heartbeat asks again
		h.cfg.Logf("ps %d: a copy of shard %d for ps %d, rejoining: %v", h.cfg.ID, sr.Shard, sr.To, err)
		return false
	}
	held := time.Since(start)
	h.wg.Add(1) // before Close can wait: it sets closed under mu
	go func() {
		defer h.wg.Done()
		b, err := encode()
		release()
		built := time.Since(start)
		h.lock()
		defer h.unlock()
		if h.closed {
			return
		}
		if err == nil {
			err = h.node.SendSnapshot(sr.Shard, sr.To, seq, b)
		} else {
			h.node.SnapshotLater(sr.Shard, sr.To)
		}
		if err != nil {
			h.cfg.Logf("ps %d: a copy of shard %d for ps %d, rejoining: %v", h.cfg.ID, sr.Shard, sr.To, err)
		} else {
			h.cfg.Logf("ps %d: sending its copy of shard %d (%d bytes, taken in %s, the locks held %s of it) to ps %d, rejoining", h.cfg.ID, sr.Shard, len(b), built.Round(time.Microsecond), held.Round(time.Microsecond), sr.To)
		}
		h.drain()
	}()
	return false
}

// writeDirect leaves a message to peer id for this goroutine to write
// once it lets go of the host's lock (MaxDirect), taking the peer's
// connection until then; false: the sender is to take it. With mu held.
func (h *Host) writeDirect(id int, b [][]byte, size int64) bool {
	if size > h.maxDirect || h.queued[id].Load() != 0 {
		return false
	}
	if !slices.Contains(h.held, id) {
		pc := &h.out[id]
		if !pc.mu.TryLock() {
			return false
		}
		if pc.conn == nil || h.queued[id].Load() != 0 {
			pc.mu.Unlock()
			return false
		}
		h.held = append(h.held, id)
	}
	h.direct = append(h.direct, directMsg{id, b, size})
	return true
}

// write writes one message as a frame on pc's connection (pc.mu held),
// closing the connection if that fails (the message is dropped: the
// protocol sends again).
func (h *Host) write(pc *peerConn, b [][]byte, size int64, timeout time.Duration) {
	frame := net.Buffers(append([][]byte{binary.LittleEndian.AppendUint32(nil, uint32(size))}, b...))
	pc.conn.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := frame.WriteTo(pc.conn); err != nil {
		pc.conn.Close()
		pc.conn = nil
	}
}

// send writes ps id's queued messages, dialling when needed; a message
// that cannot be written is dropped.
func (h *Host) send(id int) {
	defer h.wg.Done()
	pc := &h.out[id]
	defer func() {
		pc.mu.Lock()
		if pc.conn != nil {
			pc.conn.Close()
			pc.conn = nil
		}
		pc.mu.Unlock()
	}()
	for {
		var b [][]byte
		select {
		case <-h.quit:
			return
		case b = <-h.peers[id]:
		}
		n := int64(0)
		for _, p := range b {
			n += int64(len(p))
		}
		pc.mu.Lock()
		if pc.conn == nil {
			ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Timeout/2)
			c, err := h.cfg.Dial(ctx, h.cfg.Addrs[id])
			cancel()
			if err == nil {
				pc.conn = c
			}
		}
		if pc.conn != nil {
			h.write(pc, b, n, h.cfg.Timeout)
		}
		// Taken off only once written: a direct write never overtakes it.
		h.queued[id].Add(-n)
		pc.mu.Unlock()
	}
}

func (h *Host) accept() {
	defer h.wg.Done()
	for {
		c, err := h.cfg.Listener.Accept()
		if err != nil {
			select {
			case <-h.quit:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		h.connsMu.Lock()
		select {
		case <-h.quit:
			h.connsMu.Unlock()
			c.Close()
			return
		default:
		}
		h.conns[c] = true
		h.connsMu.Unlock()
		h.wg.Add(1)
		go h.read(c)
	}
}

// read decodes one connection's frames and steps the node with each, as
// the ps the connection is from (identify).
func (h *Host) read(c net.Conn) {
	defer h.wg.Done()
	defer func() {
		c.Close()
		h.connsMu.Lock()
		delete(h.conns, c)
		h.connsMu.Unlock()
	}()
	r := bufio.NewReader(c)
	var hdr [4]byte
	sender, reg, refused := -1, false, 0
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		if n > MaxFrame {
			h.cfg.Logf("replicate: a %d-byte message from %v, more than %d: connection closed", n, c.RemoteAddr(), MaxFrame)
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return
		}
		var m replica.Message
		if err := m.UnmarshalOwned(b); err != nil {
			h.cfg.Logf("replicate: from %v: %v: connection closed", c.RemoteAddr(), err)
			return
		}
		if sender < 0 {
			var why string
			if sender, reg, why = h.identify(c, m); why != "" {
				h.cfg.Logf("replicate: a connection from %v %s: closed", c.RemoteAddr(), why)
				return
			}
			if reg {
				defer h.unregister(sender, c)
			}
		}
		var err error
		if !h.do(func(n *replica.Node) { err = n.StepFrom(sender, m) }) {
			return
		}
		if err != nil {
			if refused++; refused == 1 || refused%1000 == 0 {
				h.cfg.Logf("replicate: from %v (%d refused so far): %v", c.RemoteAddr(), refused, err)
			}
			if m.From != sender {
				return
			}
		}
	}
}

// PeerTasker is a connection that knows which task its peer proved (the
// connections of secure's Listener under TLS). A replication connection
// whose peer proves a task counts only as that ps.
type PeerTasker interface {
	PeerTask() (job string, index int, ok bool)
}

// identify says which ps the connection c, whose first message is m, is
// from: the ps its peer's certificate proves (TLS), or else the ps m
// claims to be, if no other open connection registered as it (reg: c is
// now the one). why says why c is refused.
func (h *Host) identify(c net.Conn, m replica.Message) (sender int, reg bool, why string) {
	if pt, ok := c.(PeerTasker); ok {
		if job, i, ok := pt.PeerTask(); ok {
			if job != "ps" || i < 0 || i >= h.cfg.N || i == h.cfg.ID {
				return -1, false, fmt.Sprintf("proves %s %d, not another ps of this cluster (claims ps %d)", job, i, m.From)
			}
			return i, false, ""
		}
	}
	if m.From < 0 || m.From >= h.cfg.N || m.From == h.cfg.ID {
		return -1, false, fmt.Sprintf("claims to be ps %d, not another ps of a cluster of %d", m.From, h.cfg.N)
	}
	h.connsMu.Lock()
	defer h.connsMu.Unlock()
	if h.registered == nil {
		h.registered = map[int]net.Conn{}
	}
	if old := h.registered[m.From]; old != nil {
		return -1, false, fmt.Sprintf("claims to be ps %d, which is connected already from %v", m.From, old.RemoteAddr())
	}
	h.registered[m.From] = c
	return m.From, true, ""
}

func (h *Host) unregister(id int, c net.Conn) {
	h.connsMu.Lock()
	if h.registered[id] == c {
		delete(h.registered, id)
	}
	h.connsMu.Unlock()
}
