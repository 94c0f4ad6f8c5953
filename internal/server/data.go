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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/placement"
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
	conn  net.Conn
	br    *bufio.Reader
	req   wire.Request
	reply wire.Frame

	// Key caching: the key sets the worker asked this connection to keep,
	// by slot, with their rows; and scratch sets for keys sent without a
	// slot, one per section.
	slots [wire.CacheSlots]keySlot
	tmp   []*sparse.KeySet
	used  uint32 // slots the current request has named so far

	// Per-request scratch, reused.
	dense    []denseGrad
	sparse   []sparseGrad
	pushSets []located
	pullSets []located
	seen     map[*denseVar]bool
	leases   []lease // variables the reply being written reads
	pipe     *pipe   // writer of pipelined replies, once needed
	piped    bool    // the reply is being written by pipe
	state    [][]float32
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
// read, until it closes, sends a malformed frame, or ctx ends.
func (s *Server) serveData(ctx context.Context, conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	dc := &dataConn{conn: conn, br: bufio.NewReaderSize(conn, dataBufSize), seen: make(map[*denseVar]bool)}
	defer func() {
		if dc.pipe != nil {
			dc.pipe.stop()
		}
	}()
	var pre [wire.PrefaceLen]byte
	copy(pre[:], wire.DataMagic)
	if _, err := io.ReadFull(dc.br, pre[4:]); err != nil {
		return
	}
	version, err := wire.CheckPreface(pre[:])
	var hello [wire.HelloLen]byte
	h := wire.Hello{Version: wire.DataVersion, Slots: wire.CacheSlots, MaxCachedKeys: wire.MaxCachedKeys}
	if err != nil || version != wire.DataVersion {
		h.Status = wire.HelloBadVersion
	}
	h.Put(hello[:])
	if _, err := conn.Write(hello[:]); err != nil || h.Status != wire.HelloOK {
		return
	}
	for {
		err := dc.req.ReadRequest(dc.br)
		if err != nil {
			var fe *wire.FrameError
			if errors.As(err, &fe) {
				s.cfg.Logf("data connection from %s: %v; closing it", conn.RemoteAddr(), err)
				dc.errorReply(status.Error(codes.InvalidArgument, fe.Error()))
				_, _ = dc.reply.WriteTo(conn)
			}
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
		l.release()
	}
	s.mu.Unlock()
	clear(dc.leases)
	dc.leases = dc.leases[:0]
}

// errorReply makes the reply an error frame carrying err's status code
// and message.
func (dc *dataConn) errorReply(err error) {
	st := status.Convert(err)
	dc.reply.Reset(wire.RepHeaderLen)
	dc.reply.ErrorBody(uint32(st.Code()), st.Message())
	dc.reply.Reply(wire.RepHeader{Err: true})
}

// handleData answers one request: checks, applies the push through
// applyPush, waits for the pull's step and makes the reply (dc.reply, or a
// pipelined one, dc.piped), all under mu; the caller writes the reply after.
func (s *Server) handleData(ctx context.Context, dc *dataConn) {
	r := &dc.req
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heard(r.Worker)
	if !s.initialized {
		dc.errorReply(status.Errorf(codes.FailedPrecondition, "ps %d: %v", s.cfg.Task, errNotInitialized))
		return
	}
	// Find every key set before anything is applied, so that a request
	// naming a key set this connection does not hold changes nothing and
	// can be sent again with its keys.
	if err := dc.locate(); err != nil {
		dc.errorReply(status.Errorf(codes.Aborted, "ps %d: %v", s.cfg.Task, err))
		return
	}
	dropped := false
	if r.Op.Push() {
		if err := s.checkDataPush(dc); err != nil {
			dc.errorReply(s.rejectPush(r.Worker, r.Step, err))
			return
		}
		if s.syncFailed != nil {
			dc.errorReply(status.Error(codes.DeadlineExceeded, s.syncFailed.Error()))
			return
		}
		if err := s.futureStep(r.Worker, r.Step); err != nil {
			dc.errorReply(err)
			return
		}
		if s.pipelinable(dc) {
			var done bool
			if dropped, done = s.pushPipelined(dc); done {
				return
			}
		} else {
			verdict, err := s.applyPush(r.Worker, r.Step, dc.dense, dc.sparse)
			if err != nil {
				dc.errorReply(err)
				return
			}
			dropped = verdict.Dropped()
		}
	}
	if !r.Op.Pull() {
		dc.reply.Reset(wire.RepHeaderLen)
		dc.reply.Reply(wire.RepHeader{Dropped: dropped, Step: s.tracker.Step(), Incarnation: s.incarnation})
		return
	}
	if !s.tracker.Ready(r.MinStep) {
		// As with gRPC, a worker that goes away stops the wait.
		wctx, stop := dc.watchClose(ctx)
		err := s.waitStep(wctx, r.Worker, r.MinStep)
		stop()
		if err != nil {
			dc.errorReply(err)
			return
		}
	}
	if err := s.dataPull(dc, dropped); err != nil {
		dc.errorReply(status.Errorf(codes.InvalidArgument, "ps %d: %v", s.cfg.Task, err))
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
			return located{}, fmt.Errorf("table %q: key cache slot %d holds %d keys, the request counts %d: %w", sec.Table, sec.Arg, len(sl.keys), sec.NumKeys, errCacheMiss)
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

// errCacheMiss marks a request naming a key set the connection does not
// hold; the client sends the keys again.
var errCacheMiss = errors.New("key cache miss")

// checkOwned checks, with several ps, that this ps owns every key of l, as
// sparseKeys does: once for a kept set, every time for a scratch one.
func (s *Server) checkOwned(table []byte, l located) error {
	if s.cfg.NumPS <= 1 || (l.slot != nil && l.slot.owned) {
		return nil
	}
	for _, k := range l.set.Keys() {
		if ps := placement.KeyShard(k, s.cfg.NumPS); ps != s.cfg.Task {
			return fmt.Errorf("table %q: key %d belongs to ps %d, not ps %d", table, k, ps, s.cfg.Task)
		}
	}
	if l.slot != nil {
		l.slot.owned = true
	}
	return nil
}

// checkDataPush checks a data-path push as checkPush and checkSparsePush
// check a gRPC one, in the same order and with the same messages, and
// fills dc.dense and dc.sparse. Call with mu held, after locate.
func (s *Server) checkDataPush(dc *dataConn) error {
	r := &dc.req
	dc.dense, dc.sparse = dc.dense[:0], dc.sparse[:0]
	clear(dc.seen)
	for _, d := range r.Dense {
		v, ok := s.vars[string(d.Name)]
		if !ok {
			return fmt.Errorf("unknown variable %q (this ps holds %d variables)", d.Name, len(s.vars))
		}
		if dc.seen[v] {
			return fmt.Errorf("variable %q pushed twice in one request", d.Name)
		}
		dc.seen[v] = true
		if len(d.Data) != len(v.value) {
			return fmt.Errorf("variable %q: gradient has %d bytes, want %d (%d float32 of shape %v)", d.Name, 4*len(d.Data), 4*len(v.value), len(v.value), v.shape)
		}
		if j := d.Bad; j >= 0 {
			return fmt.Errorf("variable %q: gradient element %d is %v", d.Name, j, d.Data[j])
		}
		dc.dense = append(dc.dense, denseGrad{v: v, g: d.Data})
	}
	if s.tracker.Config().Sync && len(r.Dense) != 0 && len(r.Dense) != len(s.vars) {
		return fmt.Errorf("a synchronous push must carry all %d variables of this ps, got %d", len(s.vars), len(r.Dense))
	}
	for i := range r.SparsePush {
		sec := &r.SparsePush[i]
		t, ok := s.tables[string(sec.Table)]
		if !ok {
			return fmt.Errorf("unknown table %q (this ps holds %d tables)", sec.Table, len(s.tables))
		}
		l := dc.pushSets[i]
		if err := s.checkOwned(sec.Table, l); err != nil {
			return err
		}
		keys := l.set.Keys()
		dim := t.t.Dim()
		if len(sec.Values) != dim*len(keys) {
			return fmt.Errorf("table %q: %d keys of dim %d need %d bytes of gradients, got %d", sec.Table, len(keys), dim, 4*dim*len(keys), 4*len(sec.Values))
		}
		if j := sec.Bad; j >= 0 {
			return fmt.Errorf("table %q: gradient of key %d element %d is %v", sec.Table, keys[j/dim], j%dim, sec.Values[j])
		}
		dc.sparse = append(dc.sparse, sparseGrad{table: t, keys: keys, values: sec.Values, set: l.set})
	}
	return nil
}

// dataPull answers the pull half of a request: dense values lent, rows
// copied into the request's float buffer (its gradients are applied by
// now). Call with mu held, once the step is reached.
func (s *Server) dataPull(dc *dataConn, dropped bool) error {
	r := &dc.req
	// Check the tables and size the rows before copying anything.
	n := 0
	for i := range r.SparsePull {
		sec := &r.SparsePull[i]
		t, ok := s.tables[string(sec.Table)]
		if !ok {
			return fmt.Errorf("unknown table %q (this ps holds %d tables)", sec.Table, len(s.tables))
		}
		if err := s.checkOwned(sec.Table, dc.pullSets[i]); err != nil {
			return err
		}
		n += dc.pullSets[i].set.Len() * t.t.Dim()
	}
	if 4*int64(n) > wire.MaxBody {
		return fmt.Errorf("the pull asks for %d values of rows, more than a reply can carry", n)
	}
	buf := r.Floats(n)
	dc.reply.Reset(wire.RepHeaderLen)
	off := 0
	if r.PullDense {
		// Written straight from the variables, which stay lent until the
		// reply is out (lease.go).
		for _, spec := range s.layout {
			l := s.vars[spec.Name].lend()
			dc.leases = append(dc.leases, l)
			dc.reply.Dense(l.v.name, l.buf)
		}
	}
	for i := range r.SparsePull {
		sec := &r.SparsePull[i]
		t := s.tables[string(sec.Table)]
		set := dc.pullSets[i].set
		dst := buf[off : off+set.Len()*t.t.Dim()]
		if err := t.t.PullSet(set, dst); err != nil {
			return fmt.Errorf("table %q: %w", sec.Table, err)
		}
		dc.reply.SparseValues(dst)
		off += len(dst)
	}
	dc.reply.Reply(wire.RepHeader{Dropped: dropped, Step: s.tracker.Step(), Incarnation: s.incarnation})
	return nil
}
