package client

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// threadConn is a TCP connection read and written with plain system
// calls on the calling goroutine's thread, outside Go's netpoller: a read
// that finds nothing waits in poll(2) on that thread (Options.ThreadReads).
//
// It is for a caller whose goroutine is locked to its thread, as a cgo
// callback's is (the Python library's every call). When such a goroutine
// parks in a net.Conn's read, its thread has nothing else it may run: it
// gives its P away and sleeps, and once the answer comes, the thread that
// polls the network finds the goroutine, hands the P back to the locked
// thread and wakes it: three threads and two or three wake-ups a round
// trip where a plain goroutine's thread picks its own answer up. Waiting
// in poll(2) keeps the P (the runtime takes it back only if other
// goroutines need it), the kernel wakes the waiting thread itself, and
// with the socket out of the netpoller no other thread wakes for it.
//
// Deadlines and Close act on a read or write waiting in poll(2): Close at
// once (it shuts the socket down), a deadline set during the wait within
// threadPollSlice.
type threadConn struct {
	fd           int
	laddr, raddr net.Addr
	// mu is held shared by each Read and Write while it uses fd, and
	// by Close to close fd once they are out.
	mu       sync.RWMutex
	closed   atomic.Bool
	rdl, wdl atomic.Int64 // read and write deadlines, Unix nanoseconds; 0: none
}

// threadPollSlice bounds one wait in poll(2), after which a read or write
// looks at its deadline again (set meanwhile by another goroutine, as a
// cancelled call's is).
const threadPollSlice = 10 * time.Millisecond

// newThreadConn returns a threadConn on nc's socket, nc closed, where nc
// is a TCP connection; else nc itself (TLS, an in-memory connection).
func newThreadConn(nc net.Conn) net.Conn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		return nc
	}
	c := &threadConn{fd: fd, laddr: nc.LocalAddr(), raddr: nc.RemoteAddr()}
	// Closing nc takes its descriptor out of the netpoller; the socket
	// stays open through fd (a copy of the same open file, non-blocking).
	nc.Close()
	return c
}

func (c *threadConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.laddr, Addr: c.raddr, Err: err}
}

// check says why an operation may not go on: closed, or past its deadline.
func (c *threadConn) check(dl *atomic.Int64) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	if d := dl.Load(); d != 0 && time.Now().UnixNano() >= d {
		return os.ErrDeadlineExceeded
	}
	return nil
}

// wait waits in poll(2) until fd is ready for events, closed, or past the
// deadline in dl.
func (c *threadConn) wait(events int16, dl *atomic.Int64) error {
	for {
		if err := c.check(dl); err != nil {
			return err
		}
		left := threadPollSlice
		if d := dl.Load(); d != 0 {
			left = min(left, time.Until(time.Unix(0, d)))
		}
		ts := unix.NsecToTimespec(max(0, left.Nanoseconds()))
		fds := []unix.PollFd{{Fd: int32(c.fd), Events: events}}
		n, err := unix.Ppoll(fds, &ts, nil)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return os.NewSyscallError("ppoll", err)
		case n > 0:
			return nil // ready, or an error or hang-up for the call to say
		}
	}
}

func (c *threadConn) Read(p []byte) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for {
		if err := c.check(&c.rdl); err != nil {
			return 0, c.opError("read", err)
		}
		if len(p) == 0 {
			return 0, nil
		}
		n, err := unix.Read(c.fd, p)
		switch {
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			if err := c.wait(unix.POLLIN, &c.rdl); err != nil {
				return 0, c.opError("read", err)
			}
		case err != nil:
			return 0, c.opError("read", os.NewSyscallError("read", err))
		case n == 0:
			return 0, io.EOF
		default:
			return n, nil
		}
	}
}

func (c *threadConn) Write(p []byte) (int, error) {
	n, err := c.WriteBuffers(net.Buffers{p})
	return int(n), err
}

// WriteBuffers writes bufs with writev(2) (wire.BuffersWriter).
func (c *threadConn) WriteBuffers(bufs net.Buffers) (int64, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var total int64
	for len(bufs) > 0 {
		if len(bufs[0]) == 0 {
			bufs = bufs[1:]
			continue
		}
		if err := c.check(&c.wdl); err != nil {
			return total, c.opError("write", err)
		}
		n, err := unix.Writev(c.fd, bufs[:min(len(bufs), 1024)])
		switch {
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			if err := c.wait(unix.POLLOUT, &c.wdl); err != nil {
				return total, c.opError("write", err)
			}
		case err != nil:
			return total, c.opError("write", os.NewSyscallError("writev", err))
		default:
			total += int64(n)
			for n > 0 {
				k := min(n, len(bufs[0]))
				bufs[0] = bufs[0][k:]
				n -= k
				if len(bufs[0]) == 0 {
					bufs = bufs[1:]
				}
			}
		}
	}
	return total, nil
}

// Close shuts the socket down, which ends a read or write waiting in
// poll(2), and closes it once they have returned.
func (c *threadConn) Close() error {
	if c.closed.Swap(true) {
		return c.opError("close", net.ErrClosed)
	}
	_ = unix.Shutdown(c.fd, unix.SHUT_RDWR)
	c.mu.Lock()
	defer c.mu.Unlock()
	return unix.Close(c.fd)
}

func (c *threadConn) LocalAddr() net.Addr  { return c.laddr }
func (c *threadConn) RemoteAddr() net.Addr { return c.raddr }

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(1, t.UnixNano())
}

func (c *threadConn) SetDeadline(t time.Time) error {
	c.rdl.Store(unixNano(t))
	c.wdl.Store(unixNano(t))
	return nil
}

func (c *threadConn) SetReadDeadline(t time.Time) error {
	c.rdl.Store(unixNano(t))
	return nil
}

func (c *threadConn) SetWriteDeadline(t time.Time) error {
	c.wdl.Store(unixNano(t))
	return nil
}
