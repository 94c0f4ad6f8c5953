package client

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Health checks tell a ps that is silent (cut off by the network: no
// answer, no reset, and TCP would wait about 15 minutes) from one that is
// busy (a synchronous pull waits for slow workers, a large checkpoint is
// written): once a call to a ps has waited ProbeAfter, the client asks the
// ps for its Status, a cheap call that a live ps answers at once even while
// the call waits, and again every ProbeAfter while it answers. A check that
// gets no answer within ProbeTimeout ends the call with ErrUnavailable, so
// recovery runs and --recovery_timeout bounds the wait.
const (
	defaultProbeAfter   = 15 * time.Second
	defaultProbeTimeout = 20 * time.Second
)

// probe is the health check of one call to one ps.
type probe struct {
	mu      sync.Mutex // guards every field
	t       *time.Timer
	stopped bool
	err     error              // set once the ps was found silent
	cancel  context.CancelFunc // ends the check in flight, if any
}

// watch starts the health checks of ps i for a call that began now. When
// one finds the ps silent, silent is called (once, before stop returns)
// with the error, which the caller makes the call's.
func (c *Client) watch(i int, silent func(err error)) *probe {
	p := &probe{}
	start := time.Now()
	check := func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.ProbeTimeout)
		defer cancel()
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			return
		}
		p.cancel = cancel
		p.mu.Unlock()
		err := c.ping(ctx, i)
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.stopped {
			return
		}
		if err == nil {
			p.t.Reset(c.opts.ProbeAfter)
			return
		}
		p.err = withKind(ErrUnavailable, fmt.Errorf("silent: no answer to a health check within %s after the call had waited %s (%v)",
			c.opts.ProbeTimeout, time.Since(start).Round(time.Millisecond), shortErr(err)))
		silent(p.err)
	}
	p.mu.Lock()
	p.t = time.AfterFunc(c.opts.ProbeAfter, check)
	p.mu.Unlock()
	return p
}

// stop ends the checks; it returns the error if the ps was found silent.
func (p *probe) stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	p.t.Stop()
	if p.cancel != nil {
		p.cancel() // a check in flight is of no use now
	}
	return p.err
}

// watched runs f, a call to ps i, under health checks: a ps found silent
// cancels f's context and its error is the call's.
func (c *Client) watched(ctx context.Context, i int, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pr := c.watch(i, cancel)
	err := f(ctx)
	if silent := pr.stop(); silent != nil {
		return silent
	}
	return err
}

// connProbe is the health check of the calls on one data connection, one
// at a time: its timer is made once and re-armed by each call, so a call
// that does not wait costs a timer reset and stop.
type connProbe struct {
	mu     sync.Mutex // guards every field
	t      *time.Timer
	armed  bool
	gen    uint64 // counts the calls, so a check of an earlier one is ignored
	silent bool
	cancel context.CancelFunc // ends the check in flight, if any
}

// arm starts the checks of a call of d to ps i.
func (p *connProbe) arm(c *Client, i int, d *dataConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.silent = true, false
	p.gen++
	if p.t == nil {
		p.t = time.AfterFunc(c.opts.ProbeAfter, func() { p.check(c, i, d) })
		return
	}
	p.t.Reset(c.opts.ProbeAfter)
}

// check runs on the timer's goroutine once the call has waited ProbeAfter.
func (p *connProbe) check(c *Client, i int, d *dataConn) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.ProbeTimeout)
	defer cancel()
	p.mu.Lock()
	gen, armed := p.gen, p.armed
	if armed {
		p.cancel = cancel
	}
	p.mu.Unlock()
	if !armed {
		return
	}
	err := c.ping(ctx, i)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed || p.gen != gen {
		return
	}
	if err == nil {
		p.t.Reset(c.opts.ProbeAfter)
		return
	}
	p.silent = true
	d.silent = withKind(ErrUnavailable, fmt.Errorf("silent: no answer to a health check within %s after the call had waited over %s (%v)",
		c.opts.ProbeTimeout, c.opts.ProbeAfter, shortErr(err)))
	_ = d.nc.SetDeadline(time.Unix(1, 0))
}

// disarm ends the checks of the call; it reports whether the ps was found
// silent (d.silent is set then, and the connection's deadline).
func (p *connProbe) disarm() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	if p.t != nil {
		p.t.Stop()
	}
	if p.cancel != nil {
		p.cancel() // a check in flight is of no use now
		p.cancel = nil
	}
	return p.silent
}
