package secure

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// listener hands out connections that authenticate on their first Read or
// Write (see the package doc).
type listener struct {
	net.Listener
	p       *Policy
	refused *refusals
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, l: l}, nil
}

// conn is one accepted connection. Read and Write run the handshakes once,
// first; until they succeed no byte the peer sent is given to the caller.
//
// Concurrency: Read, Write, Close and the deadline setters may be called
// concurrently, as on any net.Conn; the handshake runs once (once), and
// the deadlines set meanwhile are guarded by mu.
type conn struct {
	net.Conn // the accepted connection
	l        *listener

	once sync.Once
	sec  net.Conn // after the handshake: the TLS connection, or Conn
	err  error    // the handshake's failure
	ok   atomic.Bool

	mu              sync.Mutex // guards readDL and writeDL
	readDL, writeDL time.Time  // the caller's deadlines, restored after the handshake
}

func (c *conn) handshake() error {
	c.once.Do(func() {
		c.sec, c.err = c.l.serverHandshake(c.Conn)
		if c.err != nil {
			c.Conn.Close()
			return
		}
		c.mu.Lock()
		rdl, wdl := c.readDL, c.writeDL
		c.mu.Unlock()
		_ = c.Conn.SetWriteDeadline(wdl)
		_ = c.Conn.SetReadDeadline(rdl)
		c.ok.Store(true)
	})
	return c.err
}

func (c *conn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.sec.Read(b)
}

func (c *conn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.sec.Write(b)
}

func (c *conn) Close() error {
	if c.ok.Load() {
		return c.sec.Close()
	}
	return c.Conn.Close()
}

func (c *conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDL, c.writeDL = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeDL = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDL = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// ErrRefused is what a refused connection's Read and Write return.
var ErrRefused = errors.New("secure: connection refused: it did not authenticate")

// serverHandshake authenticates raw as the ps: TLS, then the token. A
// failure is logged (rate-limited) and returned as ErrRefused.
func (l *listener) serverHandshake(raw net.Conn) (net.Conn, error) {
	p := l.p
	_ = raw.SetDeadline(time.Now().Add(p.timeout()))
	cc := &countConn{Conn: raw}
	var c net.Conn = cc
	if p.TLS() {
		tc := newTLSConn(cc, true, p.server)
		if err := tc.Handshake(); err != nil {
			l.refuse(cc, "TLS", err)
			return nil, ErrRefused
		}
		c = tc
	}
	if p.Token() {
		if err := serverToken(c, p.token); err != nil {
			l.refuse(cc, "token", err)
			return nil, ErrRefused
		}
	}
	if c == cc {
		// No TLS: from here on the TCP connection itself, so that a
		// frame's buffers go in one writev.
		return raw, nil
	}
	return c, nil
}

// countConn counts the bytes read from the peer.
type countConn struct {
	net.Conn
	n int64
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n += int64(n)
	return n, err
}

func (l *listener) refuse(raw *countConn, step string, err error) {
	// A peer that sent nothing (a port check, a load balancer's probe, an
	// idle connection) asked for nothing; the ps closing its listener is
	// no refusal either.
	if raw.n == 0 || errors.Is(err, net.ErrClosed) {
		return
	}
	why := fmt.Sprintf("%s: %v", step, err)
	if isTimeout(err) {
		why = fmt.Sprintf("%s: no handshake within %v", step, l.p.timeout())
	}
	l.refused.refuse(raw.RemoteAddr(), why)
}
