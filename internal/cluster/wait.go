package cluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// HostResolver looks up a host name's addresses; *net.Resolver is one.
type HostResolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// Clock is the time a wait runs on: the real one, or a fake in tests.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, returning ctx.Err() then.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitOptions configures [Config.WaitResolvable]. The zero value waits up
// to 5 minutes with the system's resolver, logging nothing.
type WaitOptions struct {
	Resolver HostResolver  // net.DefaultResolver if nil
	Clock    Clock         // the real clock if nil
	Timeout  time.Duration // give up after this long (5m if 0; --startup_timeout)
	LogEvery time.Duration // how often to say what is awaited (5s if 0; --wait_log_every)
	Retry    time.Duration // pause between lookups of a name that failed (500ms if 0)
	// TimeoutFlag names the flag Timeout came from ("--startup_timeout"),
	// for the line logged at a name's first failed lookup.
	TimeoutFlag string
	Logf        func(format string, args ...any)
}

// Peer is one task whose host name a task needs, with where its address
// came from.
type Peer struct {
	Task Task
	Addr string // host:port
	From string // "TF_CONFIG cluster.ps[0]", "--ps_hosts entry 1", ...
}

// Needs lists the tasks whose host names this task must resolve before it
// can start: a ps its own (it listens on it), a worker every ps (it dials
// them). Workers never dial each other.
func (c Config) Needs() []Peer {
	from := func(job string, i int) string {
		f := c.From.Hosts(job)
		if i < len(f) {
			return f[i]
		}
		if job == JobPS {
			return fmt.Sprintf("Spec.PS[%d]", i)
		}
		return fmt.Sprintf("Spec.Workers[%d]", i)
	}
	if c.Task.Job == JobPS {
		return []Peer{{c.Task, c.Addr(), from(JobPS, c.Task.Index)}}
	}
	peers := make([]Peer, len(c.Spec.PS))
	for i, a := range c.Spec.PS {
		peers[i] = Peer{Task{JobPS, i}, a, from(JobPS, i)}
	}
	return peers
}

// WaitResolvable waits until every host name in c.Needs() resolves. In a
// Kubernetes pod the names of peers (and the pod's own) may not be in DNS
// for a while after it starts. IP addresses and names that resolve at once
// return at once, logging nothing. Otherwise every o.LogEvery it logs, per
// name still awaited,
//
//	waiting for h0 (ps 0) to resolve: lookup h0: no such host (30s so far)
//
// and after o.Timeout it returns an *Error whose Source is where the
// address came from (a TF_CONFIG key or a flag entry) and whose message
// names the host, the task and the last lookup error. It returns ctx.Err()
// if ctx ends first.
func (c Config) WaitResolvable(ctx context.Context, o WaitOptions) error {
	return WaitResolvable(ctx, c.Needs(), o)
}

// WaitResolvable is [Config.WaitResolvable] for a given list of peers.
func WaitResolvable(ctx context.Context, peers []Peer, o WaitOptions) error {
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.LogEvery <= 0 {
		o.LogEvery = 5 * time.Second
	}
	if o.Retry <= 0 {
		o.Retry = 500 * time.Millisecond
	}
	type pending struct {
		Peer
		host    string
		err     error
		lastLog time.Time
	}
	var todo []*pending
	seen := make(map[string]bool)
	for _, p := range peers {
		host, _, err := net.SplitHostPort(p.Addr)
		if err != nil {
			return errorf(p.From, "%s at %q is not host:port: %v", taskName(p.Task), p.Addr, err)
		}
		if _, err := netip.ParseAddr(host); err == nil || seen[host] {
			continue // an IP address needs no lookup
		}
		seen[host] = true
		todo = append(todo, &pending{Peer: p, host: host})
	}
	start, first := o.Clock.Now(), true
	for _, p := range todo {
		p.lastLog = start
	}
	for {
		left := todo[:0]
		for _, p := range todo {
			if _, p.err = o.Resolver.LookupHost(ctx, p.host); p.err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				left = append(left, p)
			}
		}
		todo = left
		if len(todo) == 0 {
			return nil
		}
		now := o.Clock.Now()
		if first && o.Logf != nil {
			// Say at once, once, what does not resolve and what happens.
			until := o.Timeout.String()
			if o.TimeoutFlag != "" {
				until = fmt.Sprintf("%s (%v)", o.TimeoutFlag, o.Timeout)
			}
			for _, p := range todo {
				o.Logf("cannot resolve %s (%s, the address of %s); retrying until %s: %v", p.host, p.From, taskName(p.Task), until, p.err)
			}
		}
		first = false
		waited := now.Sub(start)
		if waited >= o.Timeout {
			p := todo[0]
			return &Error{Source: p.From, Err: p.err, Msg: fmt.Sprintf(
				"host %q of %s (%s) did not resolve within %v: %v", p.host, taskName(p.Task), p.Addr, o.Timeout, p.err)}
		}
		for _, p := range todo {
			if o.Logf != nil && now.Sub(p.lastLog) >= o.LogEvery {
				o.Logf("waiting for %s (%s) to resolve: %v (%v so far)", p.host, taskName(p.Task), p.err, waited.Round(time.Second))
				p.lastLog = now
			}
		}
		if err := o.Clock.Sleep(ctx, min(o.Retry, o.Timeout-waited)); err != nil {
			return err
		}
	}
}

// taskName says a task in words, "ps 0" or "worker 2".
func taskName(t Task) string { return fmt.Sprintf("%s %d", t.Job, t.Index) }
