package server

import (
	"net"

	"github.com/paramserv/paramserv/internal/consistency"
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

// pipelinable reports whether a checked push qualifies: asynchronous,
// dense only, large, and (with a pull) answerable at once and carrying
// every variable of the ps in its layout order, as the reply lists them.
// Call with mu held.
func (s *Server) pipelinable(dc *dataConn) bool {
	r := &dc.req
	if s.tracker.Config().Sync || len(r.SparsePush) != 0 || len(r.SparsePull) != 0 || len(dc.dense) == 0 || len(dc.dense) > pipeMaxVars {
		return false
	}
	n := 0
	for _, g := range dc.dense {
		n += len(g.g)
	}
	if n < pipeMin {
		return false
	}
	if !r.Op.Pull() {
		return true
	}
	if !r.PullDense || !s.tracker.Ready(r.MinStep) || len(dc.dense) != len(s.layout) {
		return false
	}
	for i, spec := range s.layout {
		if dc.dense[i].v.name != spec.Name {
			return false
		}
	}
	return true
}

// pushPipelined applies a pipelinable push and starts writing its reply
// (done, with dc.piped set: the caller waits for dc.pipe.done after
// releasing mu, and then releases dc's leases), or makes an error reply
// (done).
// A dropped push is not done: its pull, if any, goes the usual way. Call
// with mu held.
func (s *Server) pushPipelined(dc *dataConn) (dropped, done bool) {
	r := &dc.req
	verdict, err := s.applyPush(r.Worker, r.Step, nil, nil)
	if err != nil {
		dc.errorReply(err)
		return false, true
	}
	if verdict != consistency.Apply {
		return true, false
	}
	step := s.tracker.Step()
	dc.reply.Reset(wire.RepHeaderLen)
	if r.Op.Pull() {
		for _, g := range dc.dense {
			g.v.updates++
			g.v.writable()
			l := g.v.lend()
			dc.leases = append(dc.leases, l)
			dc.reply.Dense(l.v.name, l.buf)
		}
	} else {
		for _, g := range dc.dense {
			g.v.updates++
			g.v.writable()
		}
	}
	bufs := dc.reply.Reply(wire.RepHeader{Step: step, Incarnation: s.incarnation})
	if dc.pipe == nil {
		dc.pipe = startPipe(dc.conn)
	}
	p := dc.pipe
	dc.piped = true
	if !r.Op.Pull() {
		p.segs <- bufs[0] // the acknowledgement, before the update
	}
	for i, g := range dc.dense {
		v := g.v
		if r.Op.Pull() {
			// The frame is [header and name of the first variable][its
			// values][name of the next][its values]...: the names go now,
			// the values chunk by chunk once updated.
			p.segs <- bufs[2*i]
		}
		if cap(dc.state) < len(v.state) {
			dc.state = make([][]float32, len(v.state))
		}
		st := dc.state[:len(v.state)]
		for lo := 0; lo < len(v.value); lo += pipeChunk {
			hi := min(lo+pipeChunk, len(v.value))
			for j := range st {
				st[j] = v.state[j][lo:hi]
			}
			s.rule.Update(v.value[lo:hi], g.g[lo:hi], st, v.updates)
			if r.Op.Pull() {
				p.segs <- wire.Float32Bytes(v.value[lo:hi])
			}
		}
	}
	clear(dc.state)
	p.segs <- nil
	return false, true
}
