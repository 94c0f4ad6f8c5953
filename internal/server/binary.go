package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/table/sparse"
	"github.com/paramserv/paramserv/internal/wire"
)

// The data path (docs/WIRE.md): a worker's push, pull and push+pull as
// binary frames on a connection of its own, read straight into buffers that
// the connection keeps, checked and applied through the same applyPush and
// waitStep as the gRPC calls, and answered with one writev: dense values
// from the variables' own buffers, lent to the reply until it is written
// (lease.go), rows from the request's buffer, filled under the lock.

// dataConn is one data connection's state. Its goroutine owns it; two
// helpers touch parts of it while that goroutine waits for them: the
// pipe's writer reads the reply frame (pipeline.go), and a pull's wait for
// its step peeks at br (watchClose).
type dataConn struct {
	conn    net.Conn
	br      *bufio.Reader
	version int // the data path version the worker asked for
	req     wire.Request
	reply   wire.Frame

	// Key caching: the key sets the worker asked this connection to keep,
	// by slot, with their rows; and scratch sets for keys sent without a
	// slot, one per section.
	slots [wire.CacheSlots]keySlot
	tmp   []*sparse.KeySet
	used  uint32 // slots the current request has named so far

	// Per-request scratch, reused.
	pushSets []located
	pullSets []located
	push     shard.Push
	leases   []shard.Lease // variables the reply being written reads
	pipe     *pipe         // writer of pipelined replies, once needed
	piped    bool          // the reply is being written by pipe
	stream   *shard.Stream // the hooks of a pipelined push, once needed
	segs     [][]byte      // the pipelined reply's frame segments
	cur      int           // the variable being updated
	sel      []uint64      // incremental pulls: the bitmaps of the rows sent (incr_pull.go)
	dsel     []uint64      // incremental dense pulls: the bitmap of the blocks sent

	held int64 // bytes of buffers counted against Config.MaxBuffered (membound.go)
}

// keySlot is one kept key set: its own copy of the keys, and whether their
// owner was checked (with several ps, every key must be this ps's).
type keySlot struct {
	keys  []uint64
	set   sparse.KeySet
	valid bool // holds keys
	owned bool // ownership checked
}

// dataBufSize is the read buffer of a data connection: a header and the
// small sections in one read; payloads larger than it are read straight
// into their buffers.
const dataBufSize = 64 << 10

// serveData serves one data connection whose four magic bytes have been
// read, until it closes, sends a malformed frame, or ctx ends. The read
// deadline the caller set bounds the rest of the preface; once it is in,
// the deadline is cleared and handshaken is called.
func (s *Server) serveData(ctx context.Context, conn net.Conn, handshaken func()) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	dc := &dataConn{conn: conn, br: bufio.NewReaderSize(conn, dataBufSize)}
	defer func() {
		if dc.pipe != nil {
			dc.pipe.stop()
		}
		s.releaseBuffers(dc)
	}()
	var pre [wire.PrefaceLen]byte
	copy(pre[:], wire.DataMagic)
	if _, err := io.ReadFull(dc.br, pre[4:]); err != nil {
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	handshaken()
	version, err := wire.CheckPreface(pre[:])
	var hello [wire.HelloLen]byte
	h := wire.Hello{Version: wire.DataVersion, Slots: wire.CacheSlots, MaxCachedKeys: wire.MaxCachedKeys}
	switch {
	case err != nil || version < wire.DataVersion || version > wire.DataVersionIncarnation:
		h.Status = wire.HelloBadVersion
	default:
		h.Version, dc.version = version, version
	}
	h.Put(hello[:])
	if _, err := conn.Write(hello[:]); err != nil || h.Status != wire.HelloOK {
		return
	}
	task, proved := peerTask(conn)
	admit := func(h *wire.ReqHeader) error { return s.admit(dc, h) } // made once: the steady state allocates nothing
	for {
		err := dc.req.ReadRequestAdmit(dc.br, admit)
		if err != nil {
			var ae *admitError
			if errors.As(err, &ae) {
				if err := s.refused(dc, ae); err != nil {
					return
				}
				continue
			}
			var fe *wire.FrameError
			if errors.As(err, &fe) {
				s.cfg.Logf("data connection from %s: %v; closing it", conn.RemoteAddr(), err)
				dc.errorReply(fe)
				_, _ = dc.reply.WriteTo(conn)
			}
			return
		}
		if proved && (task.Job != "worker" || int32(task.Index) != dc.req.Worker) {
			// Nothing of it is applied: the connection's task is not
			// the worker it names (roles.go).
			err := asWorker(task, "a data-path request", dc.req.Worker)
			s.cfg.Logf("data connection from %s: %v; closing it", conn.RemoteAddr(), err)
			dc.errorReply(&shard.Error{Kind: shard.Invalid, Msg: err.Error(), Err: err})
			_, _ = dc.reply.WriteTo(conn)
			return
		}
		s.handleData(ctx, dc)
		if dc.piped {
			// Being written by the pipeline (pipeline.go).
			err = <-dc.pipe.done
			dc.piped = false
		} else {
			_, err = dc.reply.WriteTo(conn)
		}
		s.releaseLeases(dc)
		s.account(dc)
		if err != nil {
			return
		}
	}
}

// releaseLeases gives back the variables the last reply was written from.
func (s *Server) releaseLeases(dc *dataConn) {
	if len(dc.leases) == 0 {
		return
	}
	s.mu.Lock()
	for _, l := range dc.leases {
		l.Release()
	}
	s.mu.Unlock()
	clear(dc.leases)
	dc.leases = dc.leases[:0]
}

// errorReply makes the reply an error frame carrying err's kind (kindOf)
// and message.
func (dc *dataConn) errorReply(err error) {
	dc.reply.Reset(wire.RepHeaderLen)
	kind, msg := kindOf(err), err.Error()
	if k, m, ok := kindOfStatus(err); ok && kind == k {
		msg = m // without gRPC's "rpc error: code = ... desc = "
	}
	dc.reply.ErrorBody(kind, dc.version, msg)
	dc.reply.Reply(wire.RepHeader{Err: true})
}

// kindOf is the wire's kind of an error of the ps: a shard error's own
// kind, the ps stopping, a malformed frame, the kind a gRPC status stands
// for, or else Internal.
func kindOf(err error) wire.ErrorKind {
	var fe *wire.FrameError
	var se *stoppingError
	switch {
	case errors.As(err, &fe):
		return wire.KindMalformed
	case errors.As(err, &se):
		return wire.KindUnavailable
	}
	if k := shard.KindOf(err); k != 0 {
		return wire.ErrorKind(k)
	}
	if k, _, ok := kindOfStatus(err); ok {
		// An answer of the replicated service (Config.Replicated), which
		// speaks gRPC.
		return k
	}
	return wire.KindInternal
}

// stoppingError is a wait for a step that the ps's stopping ended: the
// worker waits for the ps to come back.
type stoppingError struct{ msg string }

func (e *stoppingError) Error() string { return e.msg }

// locateError is the error of a request whose key sets dc.locate could not
// find: a cache miss (the request can be sent again with its keys), or a
// request that breaks the rules of key sets.
func (s *Server) locateError(err error) error {
	kind := shard.Invalid
	if errors.Is(err, shard.ErrCacheMiss) {
		kind = shard.CacheMiss
	}
	return &shard.Error{Kind: kind, Msg: fmt.Sprintf("ps %d: %v", s.cfg.Task, err), Err: err}
}

// notInitialized is the error of a request to a shard without state.
func (s *Server) notInitialized() error {
	return &shard.Error{Kind: shard.NotReady, Msg: fmt.Sprintf("ps %d: %v", s.cfg.Task, shard.ErrNotInitialized), Err: shard.ErrNotInitialized}
}

// handleData answers one request: decodes it into the shard's Push,
// checks and applies it as gRPC does (Server.apply), waits for the pull's
// step and makes the reply (dc.reply, or a pipelined one, dc.piped), all
// under mu; the caller writes the reply after.
func (s *Server) handleData(ctx context.Context, dc *dataConn) {
	if s.cfg.Replicated != nil {
		s.handleReplicatedData(ctx, dc)
		return
	}
	start := time.Now()
	r := &dc.req
	s.mu.Lock()
	defer s.mu.Unlock()
	locked := time.Now()
	s.heard(r.Worker)
	// Heard again when the reply is made: a request that took long (a
	// pull of many rows from a disk tier, the chief's final evaluation)
	// must not leave its worker looking silent for as long, which after
	// the goal reads as gone (jobEnd's goneAfter).
	defer s.heard(r.Worker)
	if !s.shard.Initialized() {
		dc.errorReply(s.notInitialized())
		return
	}
	// Find every key set before anything is applied, so that a request
	// naming a key set this connection does not hold changes nothing and
	// can be sent again with its keys.
	if err := dc.locate(); err != nil {
		dc.errorReply(s.locateError(err))
		return
	}
	dropped := false
	if r.Op.Push() {
		dc.decodePush()
		var stream *shard.Stream
		if s.pipelinable(dc) {
			stream = s.pipeStream(dc)
		}
		res, err := s.apply(&dc.push, stream)
		s.stalls.push(start, locked)
		if err != nil {
			dc.errorReply(err)
			return
		}
		if dc.piped {
			dc.pipe.segs <- nil // the reply's end
			if r.Op.Pull() {
				dense, _ := pushBytes(&dc.push) // the values of the same variables
				s.cfg.Observer.Pulled(dense, 0, time.Since(start))
			}
			return
		}
		s.markOwned(dc)
		dropped = res.Dropped()
	}
	if !r.Op.Pull() {
		dc.reply.Reset(wire.RepHeaderLen)
		dc.reply.Reply(wire.RepHeader{Dropped: dropped, Step: s.shard.Step(), Incarnation: s.shard.Incarnation()})
		return
	}
	if !s.shard.Ready(r.MinStep) {
		// As with gRPC, a worker that goes away stops the wait.
		wctx, stop := dc.watchClose(ctx)
		err := s.waitStep(wctx, int(r.Worker), r.MinStep)
		stop()
		if err != nil {
			dc.errorReply(err)
			return
		}
	}
	if err := s.dataPull(dc, dropped, start); err != nil {
		dc.errorReply(err)
	}
}

// decodePush makes the request's push sections the connection's Push,
// keys from their key sets (a kept set whose ownership was checked is
// vouched for).
func (dc *dataConn) decodePush() {
	r := &dc.req
	p := &dc.push
	p.Worker, p.Step = int(r.Worker), r.Step
	p.Dense, p.Sparse = p.Dense[:0], p.Sparse[:0]
	for _, d := range r.Dense {
		p.Dense = append(p.Dense, shard.DenseGrad{Name: d.Name, Values: d.Data, Bad: d.Bad, MaxAbs: d.MaxAbs})
	}
	for i := range r.SparsePush {
		sec := &r.SparsePush[i]
		l := dc.pushSets[i]
		p.Sparse = append(p.Sparse, shard.SparseGrad{Table: sec.Table, Set: l.set, Owned: l.slot != nil && l.slot.owned, Values: sec.Values, Bad: sec.Bad, MaxAbs: sec.MaxAbs})
	}
}

// markOwned records that the kept key sets of an applied push were checked
// for ownership, so that later requests naming them skip the check.
func (s *Server) markOwned(dc *dataConn) {
	for _, l := range dc.pushSets {
		if l.slot != nil {
			l.slot.owned = true
		}
	}
}

// located is a sparse section's key set, and the slot that keeps it (nil
// for a scratch set).
type located struct {
	set  *sparse.KeySet
	slot *keySlot
}

// locate finds the key set of every sparse section, push sections first:
// the keys sent (kept in a slot if asked), those of a slot, or (pull
// sections) those of a push section of the request. Keys sent without a
// slot go in a scratch set, one per section.
func (dc *dataConn) locate() error {
	r := &dc.req
	dc.pushSets, dc.pullSets = dc.pushSets[:0], dc.pullSets[:0]
	dc.used = 0
	for i := range r.SparsePush {
		l, err := dc.locateOne(&r.SparsePush[i], i)
		if err != nil {
			return err
		}
		dc.pushSets = append(dc.pushSets, l)
	}
	for i := range r.SparsePull {
		l, err := dc.locateOne(&r.SparsePull[i], len(r.SparsePush)+i)
		if err != nil {
			return err
		}
		dc.pullSets = append(dc.pullSets, l)
	}
	return nil
}

func (dc *dataConn) locateOne(sec *wire.SparseSection, scratch int) (located, error) {
	switch sec.Mode {
	case wire.KeysAsPush:
		// The frame parser checked that the push section exists.
		push := dc.pushSets[sec.Arg]
		if want := dc.req.SparsePush[sec.Arg].Table; string(want) != string(sec.Table) {
			return located{}, fmt.Errorf("table %q: the pull takes the keys of a push to table %q", sec.Table, want)
		}
		if push.set.Len() != sec.NumKeys {
			return located{}, fmt.Errorf("table %q: the pull counts %d keys, its push section %d", sec.Table, sec.NumKeys, push.set.Len())
		}
		return push, nil
	case wire.KeysCached:
		sl := &dc.slots[sec.Arg]
		dc.used |= 1 << sec.Arg
		if !sl.valid || len(sl.keys) != sec.NumKeys {
			return located{}, fmt.Errorf("table %q: key cache slot %d holds %d keys, the request counts %d: %w", sec.Table, sec.Arg, len(sl.keys), sec.NumKeys, shard.ErrCacheMiss)
		}
		return located{set: &sl.set, slot: sl}, nil
	}
	if sec.Arg != wire.NoSlot {
		if dc.used&(1<<sec.Arg) != 0 {
			return located{}, fmt.Errorf("table %q: the request stores keys in key cache slot %d after using it", sec.Table, sec.Arg)
		}
		dc.used |= 1 << sec.Arg
		sl := &dc.slots[sec.Arg]
		sl.keys = append(sl.keys[:0], sec.Keys...)
		sl.set.Reset(sl.keys)
		sl.valid, sl.owned = true, false
		return located{set: &sl.set, slot: sl}, nil
	}
	for len(dc.tmp) <= scratch {
		dc.tmp = append(dc.tmp, &sparse.KeySet{})
	}
	set := dc.tmp[scratch]
	set.Reset(sec.Keys)
	return located{set: set}, nil
}

// watchClose returns a context that ends with ctx or when the worker
// closes the connection, for a pull that waits for its step; stop ends the
// watch. The worker sends nothing while it waits for its reply, so the
// watch peeks (consumes nothing) and is interrupted with a read deadline.
func (dc *dataConn) watchClose(ctx context.Context) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := dc.br.Peek(1); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			cancel(fmt.Errorf("worker's connection: %w", err))
		}
	}()
	return wctx, func() {
		_ = dc.conn.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = dc.conn.SetReadDeadline(time.Time{})
		cancel(nil)
	}
}

// dataPull answers the pull half of a request: dense values lent, rows
// copied into the request's float buffer (its gradients are applied by
// now). Call with mu held, once the step is reached.
func (s *Server) dataPull(dc *dataConn, dropped bool, start time.Time) error {
	r := &dc.req
	// Check the tables and size the rows before copying anything.
	n := 0
	for i := range r.SparsePull {
		dim, err := s.shard.TableDim(r.SparsePull[i].Table)
		if err != nil {
			return err
		}
		n += dc.pullSets[i].set.Len() * dim
	}
	if 4*int64(n) > wire.MaxBody {
		return &shard.Error{Kind: shard.Invalid, Msg: fmt.Sprintf("ps %d: the pull asks for %d values of rows, more than a reply can carry", s.cfg.Task, n)}
	}
	buf := r.Floats(n)
	dc.reply.Reset(wire.RepHeaderLen)
	off, dense := 0, 0
	if r.DenseIncremental {
		var err error
		if dense, err = s.pullDenseIncr(dc); err != nil {
			return err
		}
	} else if r.PullDense {
		// Written straight from the variables, which stay lent until the
		// reply is out (shard.Lease).
		for _, v := range s.shard.Vars() {
			l := v.LeaseValues()
			dc.leases = append(dc.leases, l)
			dc.reply.Dense(v.Name(), l.Values())
			dense += 4 * len(l.Values())
		}
	}
	if r.Incremental {
		dc.sizeSel()
	}
	sent := 0
	for i := range r.SparsePull {
		sec := &r.SparsePull[i]
		l := dc.pullSets[i]
		dim, _ := s.shard.TableDim(sec.Table)
		dst := buf[off : off+l.set.Len()*dim]
		owned := l.slot != nil && l.slot.owned
		if r.Incremental {
			n, err := s.pullIncr(dc, i, dim, owned, dst)
			if err != nil {
				return err
			}
			sent += n
		} else {
			if err := s.shard.PullRows(sec.Table, nil, l.set, owned, dst); err != nil {
				return err
			}
			dc.reply.SparseValues(dst)
			sent += len(dst)
		}
		if l.slot != nil {
			l.slot.owned = true
		}
		off += len(dst)
	}
	off = sent
	dc.reply.Reply(wire.RepHeader{Dropped: dropped, Step: s.shard.Step(), Incarnation: s.shard.Incarnation()})
	s.cfg.Observer.Pulled(dense, 4*off, time.Since(start))
	return nil
}
