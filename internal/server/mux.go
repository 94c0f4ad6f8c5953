package server

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/paramserv/paramserv/internal/wire"
)

// sniffTimeout bounds the wait for a new connection's first four bytes.
const sniffTimeout = 10 * time.Second

// mux shares one listener between gRPC and the data path: it reads the
// first four bytes of every connection, hands those that open with
// wire.DataMagic to the data path and every other one (gRPC's HTTP/2
// preface opens with "PRI ") to gRPC, those four bytes replayed. So a ps
// keeps one address, as cluster specs and TF_CONFIG give it.
//
// Concurrency: run accepts on one goroutine and sniffs each connection on
// its own; data connections are served on their own goroutines, tracked in
// conns (guarded by mu) and wg, and ended by close.
type mux struct {
	lis    net.Listener
	s      *Server
	ctx    context.Context // ends the data connections' waits
	cancel context.CancelFunc
	grpc   chan net.Conn
	done   chan struct{} // closed when the listener is closed

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	once   sync.Once
}

func newMux(lis net.Listener, s *Server) *mux {
	ctx, cancel := context.WithCancel(context.Background())
	return &mux{lis: lis, s: s, ctx: ctx, cancel: cancel, grpc: make(chan net.Conn), done: make(chan struct{}), conns: make(map[net.Conn]struct{})}
}

// run accepts connections until the listener is closed.
func (m *mux) run() {
	for {
		conn, err := m.lis.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			m.stopAccepting()
			return
		}
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

// track records conn so that close can end it; false once closed.
func (m *mux) track(conn net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.conns[conn] = struct{}{}
	return true
}

func (m *mux) untrack(conn net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.conns, conn)
}

func (m *mux) sniff(conn net.Conn) {
	var first [4]byte
	_ = conn.SetReadDeadline(time.Now().Add(sniffTimeout))
	_, err := io.ReadFull(conn, first[:])
	_ = conn.SetReadDeadline(time.Time{})
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
		m.s.serveData(m.ctx, conn)
		return
	}
	// gRPC owns the connection from here; it closes it itself.
	m.untrack(conn)
	select {
	case m.grpc <- &replayConn{Conn: conn, head: first[:]}:
	case <-m.done:
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

// replayConn gives back the bytes the mux read before the rest.
type replayConn struct {
	net.Conn
	head []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
