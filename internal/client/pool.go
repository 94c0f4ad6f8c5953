package client

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/paramserv/paramserv/internal/wire"
)

// connPool holds the idle data connections to one ps.
type connPool struct {
	addr string
	dial func(ctx context.Context, addr string) (net.Conn, error) // tests: nil dials TCP
	// version is the data path version asked for: DataVersionIncarnation
	// until the ps refuses it (an older ps), then the version below it
	// that the client needs (see get).
	version     atomic.Int32
	incremental bool       // the client pulls incrementally
	threadReads bool       // Options.ThreadReads
	mu          sync.Mutex // guards idle and shut
	idle        []*dataConn
	shut        bool
}

// maxIdle is the most idle connections kept per ps: more than the calls a
// worker has in flight at once, ordinarily one or two.
const maxIdle = 4

// dataConn is one connection to a ps and the memory it reuses. Only the
// call holding it (taken from its pool) touches it.
type dataConn struct {
	nc       net.Conn
	br       *bufio.Reader
	frame    wire.Frame
	hdr      [wire.RepHeaderLen]byte
	body     wire.BodyReader
	deadline bool  // a deadline is set on nc
	broken   bool  // not to be used again (a cancellation may set its deadline)
	silent   error // the health check found the ps silent (probe.go)
	probe    connProbe
	// slot[s] is the uid of the key set the ps keeps in cache slot s (0:
	// none), used[s] when it was last named.
	slot    [wire.CacheSlots]uint64
	used    [wire.CacheSlots]uint64
	clock   uint64
	scratch []float32 // rows gathered for or scattered from this ps
	version int       // the data path version the ps speaks on this connection
	incr    bool      // the ps speaks incremental pulls on this connection
	inc     incrScratch
	dincr   bool // the ps speaks incremental dense pulls on this connection
	dense   denseAnswer
	sent    sent // what the request in flight holds (send, recv)
}

// get returns an idle connection to the ps, or dials one.
func (p *connPool) get(ctx context.Context) (*dataConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		d := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return d, nil
	}
	p.mu.Unlock()
	v := int(p.version.Load())
	d, err := dial(ctx, p.addr, p.dial, v, p.threadReads)
	for errors.Is(err, errVersion) && v > wire.DataVersion {
		// An older ps: the version below (status codes in error replies
		// and no key sets kept from version 3 down, full dense pulls from
		// a ps of version 2, full pulls from one of version 1). Without
		// incremental pulls version 1 has all the client uses.
		v--
		if !p.incremental && v < wire.DataVersionKinds {
			v = wire.DataVersion
		}
		p.version.Store(int32(v))
		d, err = dial(ctx, p.addr, p.dial, v, p.threadReads)
	}
	return d, err
}

// put gives back a connection that is ready for the next request.
func (p *connPool) put(d *dataConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut || d.broken || len(p.idle) >= maxIdle {
		d.nc.Close()
		return
	}
	p.idle = append(p.idle, d)
}
