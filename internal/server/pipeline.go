package server

import (
	"net"

	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/wire"
)

// An asynchronous dense push on the data path overlaps the update with the
// reply: the tracker's verdict comes first, so the reply's header is known
// before any value changes; the variables are then updated a chunk at a
// time while a writer goroutine sends each updated chunk (push+pull) or the
// acknowledgement (push) behind. The lock is held until the last chunk is
// updated, as in applyPush, so no other request sees a variable half
// updated; only the writing goes on after it.
//
// This is applyPush with no dense gradients (the verdict, eviction, waking
// the waiting pulls), followed under the same lock by the dense updates of
// an Apply verdict: the same result, since nothing else can run in between.

// pipeMin is the fewest gradient values for which a push is pipelined,
// pipeChunk the values updated and written at a time, and pipeMaxVars the
// most variables a pipelined push may carry (so that one request never has
// more segments than the pipe holds). Chunks of 4 MiB beat 1 MiB and 256 KiB
// ones for 16 and 64 MiB variables (ps CPU per push+pull 1.28-1.37x the
// bare socket server's against 1.35-1.53x for 1 MiB in alternating runs):
// each chunk costs a hand-off to the writer and a wake-up, and with huge
// pages a longer sweep no longer costs TLB misses.
//
// A push+pull is pipelined only from more than one chunk: with one, no
// update overlaps a write, and handing the reply to the writer goroutine
// costs a wake-up on the round trip's path (1 MiB push+pull on the 2-core
// machine, alternating runs: 1.37x the bare socket pipelined, 1.26-1.30x
// written by the connection's own goroutine). A push alone is pipelined
// from pipeMin: its acknowledgement goes out before the update, so the
// worker's next request travels while this one is applied.
const (
	pipeMin     = 256 << 10
	pipeChunk   = 1 << 20
	pipeMaxVars = 64
	pipeSegs    = 2*pipeMaxVars + wire.MaxBody/4/pipeChunk + 8
)

// pipe is a connection's reply writer for pipelined pushes: a goroutine,
// started with the connection's first pipelined push and ended with the
// connection, that writes each segment sent on segs; a nil segment ends a
// reply, and the writer then sends the reply's write error (or nil) on
// done.
type pipe struct {
	segs   chan []byte
	done   chan error
	exited chan struct{}
}

// startPipe starts the writer of conn's pipelined replies.
func startPipe(conn net.Conn) *pipe {
	p := &pipe{segs: make(chan []byte, pipeSegs), done: make(chan error, 1), exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		var err error
		for seg := range p.segs {
			switch {
			case seg == nil:
				p.done <- err
				err = nil
			case err == nil:
				_, err = conn.Write(seg)
			}
		}
	}()
	return p
}

// stop ends the writer once it has written what it was sent (the
// connection is closed or about to be, so that is quick) and waits for it.
func (p *pipe) stop() {
	close(p.segs)
	<-p.exited
}

// pipelinable reports whether a push qualifies: asynchronous, dense only,
// large, and (with a pull) answerable at once and carrying every variable
// of the ps in its layout order, as the reply lists them. Call with mu
// held, after decodePush.
func (s *Server) pipelinable(dc *dataConn) bool {
	r := &dc.req
	dense := dc.push.Dense
	if s.shard.Sync() || r.DenseIncremental || len(r.SparsePush) != 0 || len(r.SparsePull) != 0 || len(dense) == 0 || len(dense) > pipeMaxVars {
		return false
	}
	n := 0
	for _, g := range dense {
		n += len(g.Values)
	}
	if n < pipeMin {
		return false
	}
	if !r.Op.Pull() {
		return true
	}
	if n <= pipeChunk {
		return false
	}
	vars := s.shard.Vars()
	if !r.PullDense || !s.shard.Ready(r.MinStep) || len(dense) != len(vars) {
		return false
	}
	for i, v := range vars {
		if string(dense[i].Name) != v.Name() {
			return false
		}
	}
	return true
}

// pipeStream returns the hooks that pipeline a push's reply behind its
// update (dc.piped is set once the verdict is Apply: the caller ends the
// reply after Apply returns, waits for dc.pipe.done after releasing mu,
// and then releases dc's leases). A dropped push calls no hook: its pull,
// if any, goes the usual way.
func (s *Server) pipeStream(dc *dataConn) *shard.Stream {
	if dc.stream != nil {
		return dc.stream
	}
	dc.stream = &shard.Stream{
		Chunk: pipeChunk,
		Begin: func(step int64) {
			pull := dc.req.Op.Pull()
			dc.reply.Reset(wire.RepHeaderLen)
			if pull {
				for _, g := range dc.push.Dense {
					l := s.shard.Var(string(g.Name)).LeaseValues()
					dc.leases = append(dc.leases, l)
					dc.reply.Dense(l.Var().Name(), l.Values())
				}
			}
			dc.segs = dc.reply.Reply(wire.RepHeader{Step: step, Incarnation: s.shard.Incarnation()})
			if dc.pipe == nil {
				dc.pipe = startPipe(dc.conn)
			}
			dc.piped = true
			if !pull {
				dc.pipe.segs <- dc.segs[0] // the acknowledgement, before the update
			}
		},
		Var: func(i int, _ *shard.Var) {
			dc.cur = i
			if dc.req.Op.Pull() {
				// The frame is [header and name of the first variable][its
				// values][name of the next][its values]...: the names go
				// now, the values chunk by chunk once updated.
				dc.pipe.segs <- dc.segs[2*i]
			}
		},
		Updated: func(_ *shard.Var, lo, hi int) {
			if dc.req.Op.Pull() {
				dc.pipe.segs <- wire.Float32Bytes(dc.leases[dc.cur].Values()[lo:hi])
			}
		},
	}
	return dc.stream
}
