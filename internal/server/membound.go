package server

import (
	"fmt"
	"runtime/debug"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// What a data connection may make the ps buffer (issue 28, item 5: six
// connections each holding a 512 MiB request took a ps from 22 MB to
// 4.24 GB, kept after they closed).
//
// A request is read whole into its connection's buffers, which the
// connection keeps for the next one. So each request's body is admitted,
// from its header, before any of it is read:
//
//   - against the largest request the job's layout allows (requestLimit):
//     every variable's values once, and rows of every table up to
//     wire.MaxCachedKeys keys, with their names and bitmaps; before Init,
//     when every request is answered NotReady, preInitBody;
//   - against what all data connections together hold (Config.MaxBuffered,
//     by default 2 × (workers + 1) requests of the largest size): the
//     buffers a connection keeps are counted from the request that grew
//     them until it closes.
//
// A request refused is answered at once with an error (Invalid over the
// layout's limit, NotReady before Init, Unavailable while the others hold
// the total) and its body is read and dropped, keeping nothing, so the
// connection goes on. A closing connection gives its buffers back, and one
// that held at least freeOSAfter returns the freed memory to the system.

// preInitBody is the largest request body read before the shard has
// state: enough for any request a worker sends while waiting for Init.
const preInitBody = 1 << 20

// freeOSAfter is the buffers a closing connection must have held for the
// ps to hand the freed memory back to the system at once
// (debug.FreeOSMemory) instead of leaving it to the runtime's scavenger.
const freeOSAfter = 64 << 20

// minMaxBuffered is the least default bound on what all data connections
// hold together.
const minMaxBuffered = 64 << 20

// bufLimits is the data path's bounds for one shard state.
type bufLimits struct {
	init        bool
	incarnation uint64
	perConn     int64 // the largest request body
	total       int64 // what all connections may hold together
	why         string
}

// dataLimits returns the data path's bounds for the shard's present
// layout, computed again only when its state changes. Call with mu held.
func (s *Server) dataLimits() bufLimits {
	init, inc := s.shard.Initialized(), s.shard.Incarnation()
	if l := s.limits; l.perConn > 0 && l.init == init && l.incarnation == inc {
		return l
	}
	l := bufLimits{init: init, incarnation: inc, perConn: preInitBody, why: "before Init"}
	if init {
		per := int64(64 << 10) // headers and the dense held block count
		values := int64(0)
		for _, v := range s.shard.Vars() {
			values += int64(v.Len())
			// Its name, count and values; 32 bytes more for a gRPC
			// message's tags and lengths (GRPCLimit).
			per += 32 + 2 + int64(len(v.Name())) + 4 + 4*int64(v.Len())
		}
		maxDim := int64(0)
		tables := s.shard.Layout().Tables
		for _, t := range tables {
			maxDim = max(maxDim, int64(t.Dim))
			// A push and a pull section, each with its name and counts.
			per += 2 * (2 + int64(len(t.Name)) + 2 + 4 + 4 + 16)
		}
		if len(tables) > 0 {
			// The rows of one request: each key inline twice (push and
			// pull), its gradient and a bit of the lack bitmap.
			per += wire.MaxCachedKeys * (16 + 4*maxDim + 1)
		}
		l.perConn = min(per, wire.MaxBody)
		l.why = fmt.Sprintf("this ps's layout: %d values in %d variables, %d tables", values, len(s.shard.Vars()), len(tables))
	}
	l.total = s.cfg.MaxBuffered
	if l.total <= 0 {
		l.total = max(2*int64(s.cfg.NumWorkers+1)*l.perConn, minMaxBuffered)
	}
	s.limits = l
	s.grpcLimit.Store(s.grpcTotal(l))
	return l
}

// admitError is a request refused before its body was read: err is the
// reply.
type admitError struct{ err error }

func (e *admitError) Error() string { return e.err.Error() }

// admit decides, from its header, whether dc reads a request's body
// (ReadRequestAdmit): within the layout's limit, and within what all
// connections may hold, counting what dc holds already.
func (s *Server) admit(dc *dataConn, h *wire.ReqHeader) error {
	s.mu.Lock()
	l := s.dataLimits()
	s.mu.Unlock()
	if h.Body > l.perConn {
		if !l.init {
			return &admitError{s.notInitialized()}
		}
		msg := fmt.Sprintf("ps %d: a request of %d bytes is over this ps's limit of %d (%s)", s.cfg.Task, h.Body, l.perConn, l.why)
		return &admitError{&shard.Error{Kind: shard.Invalid, Msg: msg}}
	}
	if grow := h.Body - dc.held; grow > 0 {
		if now := s.buffered.Add(grow); now > l.total {
			s.buffered.Add(-grow)
			msg := fmt.Sprintf("ps %d: data connections hold %d bytes of requests; a request of %d more is over the limit of %d: try again", s.cfg.Task, now-grow, grow, l.total)
			return &admitError{&stoppingError{msg: msg}}
		}
		dc.held += grow
	}
	return nil
}

// account counts what dc's buffers hold after a request (they may have
// grown past the body admitted: a pull's rows, doubling).
func (s *Server) account(dc *dataConn) {
	n := dc.req.Held()
	for i := range dc.slots {
		n += 12 * int64(cap(dc.slots[i].keys)) // a key and its row
	}
	if n > dc.held {
		s.buffered.Add(n - dc.held)
		dc.held = n
	}
}

// releaseBuffers gives back what dc held, when its connection closes.
func (s *Server) releaseBuffers(dc *dataConn) {
	held := dc.held
	s.buffered.Add(-held)
	dc.held = 0
	dc.req.Release()
	dc.slots = [wire.CacheSlots]keySlot{}
	dc.tmp = nil
	if held >= freeOSAfter && s.freeing.CompareAndSwap(false, true) {
		go func() {
			defer s.freeing.Store(false)
			debug.FreeOSMemory()
		}()
	}
}

// DataBuffered is the bytes of requests that the data connections hold
// now, as counted against Config.MaxBuffered.
func (s *Server) DataBuffered() int64 { return s.buffered.Load() }

// refused answers a request that admit refused, then reads and drops its
// body, so the connection can go on; it returns the error that ends the
// connection, if any.
func (s *Server) refused(dc *dataConn, ae *admitError) error {
	dc.errorReply(ae.err)
	if _, err := dc.reply.WriteTo(dc.conn); err != nil {
		return err
	}
	if err := dc.req.DiscardBody(dc.br); err != nil {
		return err
	}
	return nil
}

// What gRPC calls may make the ps hold (issue 28, item 5: six gRPC streams
// each sending a 256 MiB message took a ps to 1.63 GB). The bounds hold
// before gRPC reads a request, not after:
//
//   - per message: gRPC's receive limit is wire.GRPCMaxMessage (1 MiB),
//     checked against each message's 5-byte length prefix before any of
//     it is read (grpc-go's parser.recvMsg), and each stream's flow-control
//     window is grpcWindow: a stream holds at most grpcStreamCost before
//     the ps sees its request (the window, the message, and its copies
//     while it is decoded). A larger request comes in pieces (the *Pieces
//     calls, grpc.go), whose first piece declares the whole size: Init up
//     to wire.MaxBody, one Init at a time; every other request up to the
//     layout's limit (dataLimits' perConn, as on the data path), taken from
//     the bound below before any of the rest is read;
//   - all calls together: every call takes grpcStreamCost from a budget
//     when its stream opens (the ps's InTapHandle, before gRPC reads any
//     of it), keeps only its decoded request's size once that is read
//     (a pull or a barrier that waits holds little), and gives it back when
//     the call ends. The budget is Config.MaxGRPCBuffered, by default
//     2 × (workers + 1) calls of the largest request (grpcStreamCost or the
//     layout's limit), at least 64 MiB. A call past it is refused at once
//     with ResourceExhausted and the reason wire.ReasonBusy, which a client
//     tries again a few times.
//
// The layout's bound is also checked by the ps's codec (GRPCLimit), for a
// request under gRPC's limit but over a small layout's.

// grpcWindow is the flow-control window of each gRPC stream the ps reads:
// what a client may send on it before the ps reads any.
const grpcWindow = 1 << 20

// grpcStreamCost is what one gRPC stream is counted for until its request
// is decoded: its window, its message and two copies of it while decoded.
const grpcStreamCost = grpcWindow + 3*wire.GRPCMaxMessage

// grpcTotal is the bound on what all gRPC calls hold together, from the
// layout's limits l.
func (s *Server) grpcTotal(l bufLimits) int64 {
	if s.cfg.MaxGRPCBuffered > 0 {
		return s.cfg.MaxGRPCBuffered
	}
	return max(minMaxBuffered, 2*int64(s.cfg.NumWorkers+1)*max(grpcStreamCost, l.perConn))
}

// grpcBound is the present bound on what all gRPC calls hold together,
// read without the lock (a stream opens on gRPC's reading goroutine):
// the bound of the limits dataLimits last computed, or before any, of no
// layout.
func (s *Server) grpcBound() int64 {
	if b := s.grpcLimit.Load(); b > 0 {
		return b
	}
	return s.grpcTotal(bufLimits{perConn: preInitBody})
}

// busyError is a gRPC call refused for what all calls hold together.
type busyError struct{ msg string }

func (e *busyError) Error() string { return e.msg }

// grpcGrant is what one gRPC call holds of the budget. Its methods may run
// concurrently (the call's end releases it from another goroutine); mu
// guards n and done.
type grpcGrant struct {
	s    *Server
	mu   sync.Mutex
	n    int64
	done bool // released: later resizes are no-ops
}

// grpcAcquire takes n bytes of the budget for a new call, or says why not.
func (s *Server) grpcAcquire(n int64) (*grpcGrant, error) {
	g := &grpcGrant{s: s}
	return g, g.resize(n)
}

// resize makes g hold n bytes. Growing past the budget is refused, and g
// keeps what it held.
func (g *grpcGrant) resize(n int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return nil
	}
	grow := n - g.n
	if now := g.s.grpcHeld.Add(grow); grow > 0 && now > g.s.grpcBound() {
		g.s.grpcHeld.Add(-grow)
		return &busyError{fmt.Sprintf("ps %d: gRPC calls hold %d bytes; a call needs %d more, over the limit of %d: try again", g.s.cfg.Task, now-grow, grow, g.s.grpcBound())}
	}
	g.n = n
	return nil
}

// release gives back what g holds, when its call ends.
func (g *grpcGrant) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.s.grpcHeld.Add(-g.n)
	g.n, g.done = 0, true
}

// GRPCBuffered is the bytes the gRPC calls in progress hold, as counted
// against Config.MaxGRPCBuffered.
func (s *Server) GRPCBuffered() int64 { return s.grpcHeld.Load() }

// piecesAdmit refuses a request of method, of size bytes, sent in pieces
// over its limit: Init's is wire.MaxBody; another's, the layout's (before
// Init, a request over preInitBody is answered not initialised).
func (s *Server) piecesAdmit(method string, size int64) error {
	if method == "Init" {
		if size > wire.MaxBody {
			return &shard.Error{Kind: shard.Invalid, Msg: fmt.Sprintf("ps %d: an Init of %d bytes is over the limit of %d", s.cfg.Task, size, int64(wire.MaxBody))}
		}
		return nil
	}
	s.mu.Lock()
	l := s.dataLimits()
	s.mu.Unlock()
	if size <= l.perConn {
		return nil
	}
	if !l.init {
		return s.notInitialized()
	}
	return &shard.Error{Kind: shard.Invalid, Msg: fmt.Sprintf("ps %d: a %s request of %d bytes is over this ps's limit of %d (%s)", s.cfg.Task, method, size, l.perConn, l.why)}
}

// grpcAdmit refuses a gRPC request v of n bytes over the layout's limit.
func (s *Server) grpcAdmit(v any, n int) error {
	if _, ok := v.(*pb.InitRequest); ok {
		return nil
	}
	if _, ok := v.(*pb.CollectiveRequest); ok && n <= maxCollectiveBytes {
		return nil // its own bound, whatever the layout (collective.go)
	}
	s.mu.Lock()
	l := s.dataLimits()
	s.mu.Unlock()
	if int64(n) <= l.perConn {
		return nil
	}
	what := fmt.Sprintf("%T", v)
	if m, ok := v.(proto.Message); ok {
		what = string(proto.MessageName(m).Name())
	}
	return fmt.Errorf("ps %d: a gRPC %s of %d bytes is over this ps's limit of %d (%s)", s.cfg.Task, what, n, l.perConn, l.why)
}
