package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/paramserv/paramserv/internal/wire"
)

// sniffTimeout (Config.HandshakeTimeout) bounds a new connection's handshake, from its accept: its
// first four bytes and, on the data path, the rest of its preface (the
// ps's hello answers it); gRPC bounds its own (grpc.ConnectionTimeout in
// GRPCOptions). A peer that sends them a byte at a time (slowloris) is cut
// when it runs out, as one that sends nothing is.
const sniffTimeout = 10 * time.Second

// grpcHandshakeLen is what a gRPC connection has sent once its handshake
// is done: the HTTP/2 client preface (24 bytes) and its SETTINGS frame's
// header (9); until then the connection is one the mux may shed.
const grpcHandshakeLen = 24 + 9

// Accept errors that are not the listener's end (the process is out of file
// descriptors, a connection was reset before it was accepted, ...) are
// retried after a pause that doubles from minAcceptDelay to maxAcceptDelay,
// as net/http's Server does. The ps keeps serving; it never stops accepting
// for one of them.
const (
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
	// burstGap: an accept error that comes this long after the previous
	// one starts a new burst, which is logged again.
	burstGap = time.Minute
)

// mux shares one listener between gRPC and the data path: it reads the
// first four bytes of every connection, hands those that open with
// wire.DataMagic to the data path and every other one (gRPC's HTTP/2
// preface opens with "PRI ") to gRPC, those four bytes replayed. So a ps
// keeps one address, as cluster specs and TF_CONFIG give it.
//
// Out of file descriptors (EMFILE, ENFILE), the accept loop closes the
// oldest connection that has not completed its handshake (its first four
// bytes, then the data path's preface or gRPC's), pauses and tries again,
// so a flood of idle connections, bare or having sent a preface's first
// bytes ("PSDP", "PRI "), cannot lock the workers out nor stop the ps; it
// logs the condition once per burst. Every handshake has a deadline
// (sniffTimeout), so such connections go on their own too.
//
// Concurrency: run accepts on one goroutine and sniffs each connection on
// its own; data connections are served on their own goroutines, tracked in
// conns (guarded by mu) and wg, and ended by close. Connections being
// sniffed are also in sniffing (guarded by mu), with their accept time.
type mux struct {
	lis    net.Listener
	s      *Server
	ctx    context.Context // ends the data connections' waits
	cancel context.CancelFunc
	grpc   chan net.Conn
	done   chan struct{} // closed when the listener is closed

	mu       sync.Mutex // guards conns, sniffing and closed
	conns    map[net.Conn]struct{}
	sniffing map[net.Conn]time.Time // handshake not completed, by accept time
	closed   bool
	wg       sync.WaitGroup
	once     sync.Once

	// Owned by run: the current burst of accept errors.
	lastAcceptErr time.Time // when the last one came (zero: none yet)
	burstErrs     int       // accept errors in the current burst
	burstShed     int       // idle connections closed in the current burst
}

func newMux(lis net.Listener, s *Server) *mux {
	ctx, cancel := context.WithCancel(context.Background())
	return &mux{lis: lis, s: s, ctx: ctx, cancel: cancel, grpc: make(chan net.Conn), done: make(chan struct{}), conns: make(map[net.Conn]struct{}), sniffing: make(map[net.Conn]time.Time)}
}

// run accepts connections until the listener is closed.
func (m *mux) run() {
	var delay time.Duration
	for {
		conn, err := m.lis.Accept()
		if err != nil {
			if !retryAccept(err) || m.isDone() {
				m.stopAccepting()
				return
			}
			m.acceptFailed(err)
			if delay == 0 {
				delay = minAcceptDelay
			} else {
				delay = min(2*delay, maxAcceptDelay)
			}
			if outOfFiles(err) && m.shedOldest() {
				// A descriptor is free again: try at once, or nearly.
				delay = minAcceptDelay
			}
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-m.done:
				t.Stop()
				return
			}
			continue
		}
		delay = 0
		if !m.track(conn) {
			conn.Close()
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.sniff(conn)
		}()
	}
}

// retryAccept reports whether an accept error is a passing condition of
// the process or of one connection, to be retried, rather than the
// listener's end. Out of file descriptors is the case that matters (issue
// 12: 1,100 idle connections under a limit of 1,024 stopped the ps).
func retryAccept(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

func (m *mux) isDone() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// acceptFailed counts an accept error and logs the first of a burst, with
// what the previous burst came to.
func (m *mux) acceptFailed(err error) {
	now := time.Now()
	newBurst := m.lastAcceptErr.IsZero() || now.Sub(m.lastAcceptErr) >= burstGap
	m.lastAcceptErr = now
	if !newBurst {
		m.burstErrs++
		return
	}
	prev := ""
	if m.burstErrs > 0 {
		prev = fmt.Sprintf(" (the previous burst: %d failed accepts, %d idle connections closed)", m.burstErrs, m.burstShed)
	}
	m.burstErrs, m.burstShed = 1, 0
	what := "retrying"
	if outOfFiles(err) {
		what = "closing the oldest connections that have not said what they are, and retrying (raise the open-file limit, ulimit -n, if the workers need more)"
	}
	m.s.cfg.Logf("accepting connections on %s: %v; %s after a pause of %v to %v; logged once per burst%s", m.lis.Addr(), err, what, minAcceptDelay, maxAcceptDelay, prev)
}

// shedOldest closes the oldest connection that has not yet sent its first
// four bytes; false if there is none.
func (m *mux) shedOldest() bool {
	m.mu.Lock()
	var oldest net.Conn
	var at time.Time
	for c, t := range m.sniffing {
		if oldest == nil || t.Before(at) {
			oldest, at = c, t
		}
	}
	if oldest != nil {
		delete(m.sniffing, oldest)
	}
	m.mu.Unlock()
	if oldest == nil {
		return false
	}
	m.burstShed++
	oldest.Close() // its sniff goroutine sees the error and untracks it
	return true
}

// track records conn so that close can end it; false once closed.
func (m *mux) track(conn net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.conns[conn] = struct{}{}
	m.sniffing[conn] = time.Now()
	return true
}

func (m *mux) untrack(conn net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.conns, conn)
	delete(m.sniffing, conn)
}

func (s *Server) handshakeTimeout() time.Duration {
	if s.cfg.HandshakeTimeout > 0 {
		return s.cfg.HandshakeTimeout
	}
	return sniffTimeout
}

// identified takes conn out of the connections that may be shed: its
// handshake is done.
func (m *mux) identified(conn net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sniffing, conn)
}

func (m *mux) sniff(conn net.Conn) {
	var first [4]byte
	// One deadline for the whole handshake: serveData clears it once the
	// data path's preface is in.
	_ = conn.SetReadDeadline(time.Now().Add(m.s.handshakeTimeout()))
	_, err := io.ReadFull(conn, first[:])
	if err != nil {
		m.untrack(conn)
		conn.Close()
		return
	}
	if string(first[:]) == wire.DataMagic {
		defer func() {
			m.untrack(conn)
			conn.Close()
		}()
		m.s.serveData(m.ctx, conn, func() { m.identified(conn) })
		return
	}
	// gRPC owns the connection from here and bounds its handshake itself;
	// the mux may shed it until it has sent its preface and settings.
	_ = conn.SetReadDeadline(time.Time{})
	select {
	case m.grpc <- &replayConn{Conn: conn, head: first[:], m: m}:
	case <-m.done:
		m.untrack(conn)
		conn.Close()
	}
}

func (m *mux) stopAccepting() {
	m.once.Do(func() {
		close(m.done)
		m.lis.Close()
	})
}

// close stops accepting, ends every data connection and waits for their
// goroutines.
func (m *mux) close() {
	m.stopAccepting()
	m.cancel()
	m.mu.Lock()
	m.closed = true
	for c := range m.conns {
		c.Close()
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// grpcListener is the listener gRPC serves: the connections that are not
// the data path's.
func (m *mux) grpcListener() net.Listener { return grpcListener{m} }

type grpcListener struct{ m *mux }

func (l grpcListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.m.grpc:
		return c, nil
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

func (l grpcListener) Close() error   { l.m.stopAccepting(); return nil }
func (l grpcListener) Addr() net.Addr { return l.m.lis.Addr() }

// replayConn gives back the bytes the mux read before the rest, and tells
// the mux once the gRPC handshake is in (grpcHandshakeLen) or the
// connection closed. gRPC reads it from one goroutine at a time.
type replayConn struct {
	net.Conn
	head []byte
	m    *mux
	read int // bytes read, counted up to grpcHandshakeLen
}

func (c *replayConn) Read(p []byte) (int, error) {
	var n int
	var err error
	if len(c.head) > 0 {
		n = copy(p, c.head)
		c.head = c.head[n:]
	} else {
		n, err = c.Conn.Read(p)
	}
	if c.read < grpcHandshakeLen {
		if c.read += n; c.read >= grpcHandshakeLen {
			c.m.untrack(c.Conn)
		}
	}
	return n, err
}

func (c *replayConn) Close() error {
	c.m.untrack(c.Conn)
	return c.Conn.Close()
}
