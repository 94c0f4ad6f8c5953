package replication

import (
	"net"
	"sync"
)

// accepted tracks the connections l accepts, so that a copy that is not
// the primary can send its workers back to it (dropConns).
func (c *shardCopy) accepted(l net.Listener) net.Listener { return &trackingListener{l, c} }

type trackingListener struct {
	net.Listener
	c *shardCopy
}

func (t *trackingListener) Accept() (net.Conn, error) {
	conn, err := t.Listener.Accept()
	if err == nil {
		t.c.mu.Lock()
		t.c.conns[conn] = true
		t.c.mu.Unlock()
		conn = &trackedConn{conn, t.c}
	}
	return conn, err
}

type trackedConn struct {
	net.Conn
	c *shardCopy
}

func (t *trackedConn) Close() error {
	t.c.mu.Lock()
	delete(t.c.conns, t.Conn)
	t.c.mu.Unlock()
	return t.Conn.Close()
}

// dropConns closes the workers' connections to this copy: a worker that
// reached a copy while its primary was only slow (at start, or under
// load) dials again, and its dialler tries the primary first.
func (c *shardCopy) dropConns() {
	c.mu.Lock()
	conns := c.conns
	c.conns = map[net.Conn]bool{}
	c.mu.Unlock()
	for conn := range conns {
		conn.Close()
	}
}

// reopenable is a listener that can stop listening for a while (pause:
// connections are refused) and listen again at the same address (resume),
// while its Accept simply waits: the ps address of a ps that rejoins,
// whose own shard is served by another copy meanwhile.
type reopenable struct {
	addr   string
	listen func(string) (net.Listener, error)
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once

	mu  sync.Mutex
	cur net.Listener
	at  net.Addr
}

func openReopenable(addr string, listen func(string) (net.Listener, error)) (*reopenable, error) {
	r := &reopenable{addr: addr, listen: listen, conns: make(chan net.Conn), done: make(chan struct{})}
	return r, r.resume()
}

func (r *reopenable) resume() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != nil {
		return nil
	}
	select {
	case <-r.done:
		return net.ErrClosed
	default:
	}
	l, err := r.listen(r.addr)
	if err != nil {
		return err
	}
	r.cur, r.at = l, l.Addr()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case r.conns <- c:
			case <-r.done:
				c.Close()
				return
			}
		}
	}()
	return nil
}

func (r *reopenable) pause() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != nil {
		r.cur.Close()
		r.cur = nil
	}
}

func (r *reopenable) paused() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur == nil
}

func (r *reopenable) Accept() (net.Conn, error) {
	select {
	case c := <-r.conns:
		return c, nil
	case <-r.done:
		return nil, net.ErrClosed
	}
}

func (r *reopenable) Close() error {
	r.once.Do(func() { close(r.done) })
	r.pause()
	return nil
}

func (r *reopenable) Addr() net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at
}
