// Package memnet is an in-memory network for tests: listeners and dialled
// connections that behave like loopback TCP (buffered both ways, deadlines,
// close seen by the peer) and faults a test turns on and off per address,
// as hashicorp/raft's inmem_transport and etcd's rafttest network do for
// their transports. The real gRPC service and the real binary protocol run
// over it unchanged, so a test drives whole ps processes' code in one
// process, with no sockets.
//
// Faults, per listening address:
//
//   - Refuse: new dials fail at once ("connection refused"), as for a
//     host with no process on the port.
//   - Partition: the address is cut off without a reset. Open connections
//     stay open, writes are taken and lost, reads wait (until a deadline or
//     a local Close), and new dials hang until their context ends: what a
//     worker sees when a ps host's packets are dropped.
//   - Reset: every open connection to the address is closed under both
//     ends, as when the process dies.
//   - Delay: each write to or from the address takes d longer.
//
// Heal undoes Partition, Refuse and Delay for new traffic. A listener
// killed (Kill: its connections reset, as a process's death does) and a new
// one opened on the same address is a restarted process; Close only stops
// accepting, as closing a TCP listener does.
//
// A Network is safe for concurrent use.
package memnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Network is a set of listening addresses and the faults on them.
type Network struct {
	mu        sync.Mutex // guards every field below
	listeners map[string]*Listener
	faults    map[string]*fault
	nextPort  int
}

type fault struct {
	refuse    bool
	partition bool
	delay     time.Duration
	healed    chan struct{} // closed by Heal: hanging dials try again
}

// New returns an empty network.
func New() *Network {
	return &Network{listeners: map[string]*Listener{}, faults: map[string]*fault{}, nextPort: 40000}
}

func (n *Network) fault(addr string) *fault {
	f, ok := n.faults[addr]
	if !ok {
		f = &fault{healed: make(chan struct{})}
		n.faults[addr] = f
	}
	return f
}

// Listen opens a listener on addr ("" or a port 0 picks a free address).
// An address already listened on is refused, as the kernel refuses a port
// in use.
func (n *Network) Listen(addr string) (*Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == "" || addr == "127.0.0.1:0" {
		for {
			n.nextPort++
			addr = fmt.Sprintf("127.0.0.1:%d", n.nextPort)
			if n.listeners[addr] == nil {
				break
			}
		}
	}
	if n.listeners[addr] != nil {
		return nil, &net.OpError{Op: "listen", Net: "mem", Addr: memAddr(addr), Err: syscall.EADDRINUSE}
	}
	l := &Listener{n: n, addr: addr, conns: make(chan net.Conn, 128), closed: make(chan struct{}), open: map[*end]bool{}}
	n.listeners[addr] = l
	return l, nil
}

// Dial connects to addr as net.Dialer.DialContext does: refused at once if
// nothing listens or the address refuses, hanging until ctx ends if it is
// partitioned.
func (n *Network) Dial(ctx context.Context, addr string) (net.Conn, error) {
	for {
		n.mu.Lock()
		f := n.fault(addr)
		l := n.listeners[addr]
		switch {
		case f.partition:
			healed := f.healed
			n.mu.Unlock()
			select {
			case <-healed:
				continue
			case <-ctx.Done():
				return nil, &net.OpError{Op: "dial", Net: "mem", Addr: memAddr(addr), Err: ctx.Err()}
			}
		case f.refuse || l == nil:
			n.mu.Unlock()
			return nil, &net.OpError{Op: "dial", Net: "mem", Addr: memAddr(addr), Err: syscall.ECONNREFUSED}
		}
		client, server := pair(n, addr)
		l.mu.Lock()
		if l.shut {
			l.mu.Unlock()
			n.mu.Unlock()
			return nil, &net.OpError{Op: "dial", Net: "mem", Addr: memAddr(addr), Err: syscall.ECONNREFUSED}
		}
		l.open[client] = true
		l.open[server] = true
		l.mu.Unlock()
		n.mu.Unlock()
		select {
		case l.conns <- server:
			return client, nil
		case <-l.closed:
			return nil, &net.OpError{Op: "dial", Net: "mem", Addr: memAddr(addr), Err: syscall.ECONNREFUSED}
		case <-ctx.Done():
			client.Close()
			return nil, &net.OpError{Op: "dial", Net: "mem", Addr: memAddr(addr), Err: ctx.Err()}
		}
	}
}

// Refuse makes new dials to addr fail at once.
func (n *Network) Refuse(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fault(addr).refuse = true
}

// Partition cuts addr off without a reset (see the package doc).
func (n *Network) Partition(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fault(addr).partition = true
}

// Delay makes every write to or from addr take d longer.
func (n *Network) Delay(addr string, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fault(addr).delay = d
}

// Heal ends the faults on addr; connections cut by a partition stay cut
// (their bytes are lost), new ones work.
func (n *Network) Heal(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := n.fault(addr)
	close(f.healed)
	n.faults[addr] = &fault{healed: make(chan struct{})}
}

// Reset closes every open connection to addr at both ends, as the death of
// the process behind it does; the listener stays.
func (n *Network) Reset(addr string) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	if l != nil {
		l.resetAll()
	}
}

func (n *Network) state(addr string) (partitioned bool, delay time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := n.fault(addr)
	return f.partition, f.delay
}

// Listener is a listening address of a Network.
type Listener struct {
	n      *Network
	addr   string
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once

	mu   sync.Mutex // guards open and shut
	open map[*end]bool
	shut bool
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, &net.OpError{Op: "accept", Net: "mem", Addr: memAddr(l.addr), Err: net.ErrClosed}
	}
}

// Close stops listening (the address is free again); connections already
// accepted stay open, as with a TCP listener.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.n.mu.Lock()
		if l.n.listeners[l.addr] == l {
			delete(l.n.listeners, l.addr)
		}
		l.n.mu.Unlock()
		l.mu.Lock()
		l.shut = true
		l.mu.Unlock()
	})
	return nil
}

// Kill is the death of the process behind the listener: it stops
// listening and resets every connection accepted from it at both ends,
// whatever was still in flight.
func (l *Listener) Kill() {
	l.Close()
	l.resetAll()
}

// Addr is the listening address.
func (l *Listener) Addr() net.Addr { return memAddr(l.addr) }

func (l *Listener) resetAll() {
	l.mu.Lock()
	ends := make([]*end, 0, len(l.open))
	for e := range l.open {
		ends = append(ends, e)
	}
	clear(l.open)
	l.mu.Unlock()
	for _, e := range ends {
		e.reset()
	}
}

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

// maxBuffered is what a direction holds before a write waits, as a socket's
// buffers do.
const maxBuffered = 4 << 20

// pipe is one direction of a connection.
type pipe struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	closed bool // the writer closed: reads drain, then EOF
	reset  bool // reset: reads and writes fail
}

func newPipe() *pipe {
	p := &pipe{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// end is one end of a connection: it reads from in and writes to out.
type end struct {
	n      *Network
	addr   string // the listening address the connection belongs to
	local  memAddr
	remote memAddr
	in     *pipe
	out    *pipe

	dmu           sync.Mutex // guards the deadlines and their timers
	readDeadline  time.Time
	writeDeadline time.Time
	readTimer     *time.Timer // wakes a read waiting at its deadline
	writeTimer    *time.Timer
	closeOnce     sync.Once
}

func pair(n *Network, addr string) (client, server *end) {
	a, b := newPipe(), newPipe()
	client = &end{n: n, addr: addr, local: memAddr("client"), remote: memAddr(addr), in: a, out: b}
	server = &end{n: n, addr: addr, local: memAddr(addr), remote: memAddr("client"), in: b, out: a}
	return client, server
}

var errReset = &net.OpError{Op: "read", Net: "mem", Err: syscall.ECONNRESET}

func (e *end) Read(b []byte) (int, error) {
	p := e.in
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.reset {
			return 0, errReset
		}
		if len(p.buf) > 0 {
			k := copy(b, p.buf)
			p.buf = p.buf[k:]
			p.cond.Broadcast()
			return k, nil
		}
		if p.closed {
			return 0, io.EOF
		}
		if e.expired(true) {
			return 0, &net.OpError{Op: "read", Net: "mem", Err: os.ErrDeadlineExceeded}
		}
		p.cond.Wait()
	}
}

func (e *end) Write(b []byte) (int, error) {
	partitioned, delay := e.n.state(e.addr)
	if partitioned {
		return len(b), nil // taken, and lost on the way
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	p := e.out
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for len(b) > 0 {
		if p.reset || p.closed {
			return n, &net.OpError{Op: "write", Net: "mem", Err: syscall.EPIPE}
		}
		if e.expired(false) {
			return n, &net.OpError{Op: "write", Net: "mem", Err: os.ErrDeadlineExceeded}
		}
		room := maxBuffered - len(p.buf)
		if room <= 0 {
			p.cond.Wait()
			continue
		}
		k := min(room, len(b))
		p.buf = append(p.buf, b[:k]...)
		b, n = b[k:], n+k
		p.cond.Broadcast()
	}
	return n, nil
}

// Close closes this end: the peer reads what was written, then EOF.
func (e *end) Close() error {
	e.closeOnce.Do(func() {
		for _, p := range []*pipe{e.out, e.in} {
			p.mu.Lock()
			p.closed = true
			p.cond.Broadcast()
			p.mu.Unlock()
		}
		// A read of this end fails from now on.
		e.in.mu.Lock()
		e.in.reset = true
		e.in.cond.Broadcast()
		e.in.mu.Unlock()
		e.dmu.Lock()
		for _, t := range []*time.Timer{e.readTimer, e.writeTimer} {
			if t != nil {
				t.Stop()
			}
		}
		e.dmu.Unlock()
	})
	return nil
}

func (e *end) reset() {
	for _, p := range []*pipe{e.in, e.out} {
		p.mu.Lock()
		p.reset = true
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

func (e *end) LocalAddr() net.Addr  { return e.local }
func (e *end) RemoteAddr() net.Addr { return e.remote }

func (e *end) SetDeadline(t time.Time) error {
	e.setDeadline(t, true)
	e.setDeadline(t, false)
	return nil
}
func (e *end) SetReadDeadline(t time.Time) error  { e.setDeadline(t, true); return nil }
func (e *end) SetWriteDeadline(t time.Time) error { e.setDeadline(t, false); return nil }

func (e *end) setDeadline(t time.Time, read bool) {
	p := e.out
	if read {
		p = e.in
	}
	e.dmu.Lock()
	timer := &e.writeTimer
	if read {
		e.readDeadline, timer = t, &e.readTimer
	} else {
		e.writeDeadline = t
	}
	if *timer != nil {
		(*timer).Stop()
		*timer = nil
	}
	if !t.IsZero() {
		*timer = time.AfterFunc(time.Until(t), func() {
			p.mu.Lock()
			p.cond.Broadcast()
			p.mu.Unlock()
		})
	}
	e.dmu.Unlock()
	p.mu.Lock()
	p.cond.Broadcast() // a deadline in the past wakes a waiting read now
	p.mu.Unlock()
}

func (e *end) expired(read bool) bool {
	e.dmu.Lock()
	defer e.dmu.Unlock()
	d := e.writeDeadline
	if read {
		d = e.readDeadline
	}
	return !d.IsZero() && !time.Now().Before(d)
}

// ErrRefused reports whether err is a refused dial.
func ErrRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
