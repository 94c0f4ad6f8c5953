package secure

import (
	"net"
	"sync"
)

// gatherBytes: buffers of a frame up to this many bytes in all are copied
// into one write (one TLS record, one system call) rather than written one
// by one; a larger frame has its small buffers gathered and its large ones
// written as they are.
const (
	gatherBytes = 64 << 10
	smallBuffer = 4 << 10
)

// gatherer writes net.Buffers to an encrypting connection in few writes.
//
// Concurrency: mu guards scratch; writes to w are the caller's to order.
type gatherer struct {
	mu      sync.Mutex
	scratch []byte
}

func (g *gatherer) writeBuffers(w interface{ Write([]byte) (int, error) }, bufs net.Buffers) (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var total int64
	for _, b := range bufs {
		total += int64(len(b))
	}
	var n int64
	flush := func() error {
		if len(g.scratch) == 0 {
			return nil
		}
		m, err := w.Write(g.scratch)
		n += int64(m)
		g.scratch = g.scratch[:0]
		return err
	}
	for _, b := range bufs {
		if total <= gatherBytes || len(b) < smallBuffer {
			g.scratch = append(g.scratch, b...)
			if len(g.scratch) >= gatherBytes {
				if err := flush(); err != nil {
					return n, err
				}
			}
			continue
		}
		if err := flush(); err != nil {
			return n, err
		}
		m, err := w.Write(b)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	err := flush()
	if cap(g.scratch) > 2*gatherBytes {
		g.scratch = nil
	}
	return n, err
}

// WriteBuffers writes a frame's buffers (wire.BuffersWriter): over TLS
// gathered into few records, over plain TCP with one writev.
func (c *conn) WriteBuffers(bufs net.Buffers) (int64, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	if tc, ok := c.sec.(*tlsConn); ok {
		return tc.WriteBuffers(bufs)
	}
	return bufs.WriteTo(c.sec)
}
