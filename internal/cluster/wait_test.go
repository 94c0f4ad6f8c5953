package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeClock advances only when slept on.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.now = c.now.Add(d)
	return nil
}

// fakeDNS resolves a name once the clock has reached its time; names it
// does not know never resolve.
type fakeDNS struct {
	clock   *fakeClock
	start   time.Time
	after   map[string]time.Duration
	lookups map[string]int
}

func newFakeDNS(after map[string]time.Duration) (*fakeDNS, *fakeClock) {
	c := &fakeClock{now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	return &fakeDNS{clock: c, start: c.now, after: after, lookups: map[string]int{}}, c
}

func (d *fakeDNS) LookupHost(ctx context.Context, host string) ([]string, error) {
	d.lookups[host]++
	if a, ok := d.after[host]; ok && d.clock.now.Sub(d.start) >= a {
		return []string{"10.0.0.1"}, nil
	}
	return nil, fmt.Errorf("lookup %s: no such host", host)
}

type logLines []string

func (l *logLines) logf(format string, args ...any) { *l = append(*l, fmt.Sprintf(format, args...)) }

func resolveTF(t *testing.T, tfConfig string) Config {
	t.Helper()
	c, err := Resolve(Flags{}, tfConfig)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWaitResolvableAtOnce(t *testing.T) {
	c := resolveTF(t, `{"cluster":{"ps":["h0:2222","10.1.2.3:2222"],"worker":["w0:2222"]},"task":{"type":"worker","index":0}}`)
	dns, clock := newFakeDNS(map[string]time.Duration{"h0": 0})
	var log logLines
	err := c.WaitResolvable(context.Background(), WaitOptions{Resolver: dns, Clock: clock, Logf: log.logf})
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 0 || !clock.now.Equal(dns.start) {
		t.Errorf("a name that resolves at once: logged %q, slept %v; want nothing", log, clock.now.Sub(dns.start))
	}
	if want := map[string]int{"h0": 1}; fmt.Sprint(dns.lookups) != fmt.Sprint(want) {
		t.Errorf("lookups %v, want %v (an IP address is not looked up; the worker itself is not)", dns.lookups, want)
	}
}

func TestWaitResolvableLate(t *testing.T) {
	c := resolveTF(t, `{"cluster":{"ps":["h0:2222","h1:2222"],"worker":["w0:2222"]},"task":{"type":"worker","index":0}}`)
	dns, clock := newFakeDNS(map[string]time.Duration{"h0": 31 * time.Second, "h1": 7 * time.Second})
	var log logLines
	err := c.WaitResolvable(context.Background(), WaitOptions{
		Resolver: dns, Clock: clock, Logf: log.logf, LogEvery: 10 * time.Second, Retry: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"cannot resolve h0 (TF_CONFIG cluster.ps[0], the address of ps 0); retrying until 5m0s: lookup h0: no such host",
		"cannot resolve h1 (TF_CONFIG cluster.ps[1], the address of ps 1); retrying until 5m0s: lookup h1: no such host",
		"waiting for h0 (ps 0) to resolve: lookup h0: no such host (10s so far)",
		"waiting for h0 (ps 0) to resolve: lookup h0: no such host (20s so far)",
		"waiting for h0 (ps 0) to resolve: lookup h0: no such host (30s so far)",
	}
	if !slices.Equal(log, want) {
		t.Errorf("log\n%s\nwant\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}
	if got := clock.now.Sub(dns.start); got != 31*time.Second {
		t.Errorf("returned after %v, want 31s (the first lookup after h0 appears)", got)
	}
}

func TestWaitResolvableLogsEachAwaited(t *testing.T) {
	c := resolveTF(t, `{"cluster":{"ps":["h0:2222","h1:2222"],"worker":["w0:2222"]},"task":{"type":"worker","index":0}}`)
	dns, clock := newFakeDNS(map[string]time.Duration{"h0": 6 * time.Second, "h1": 6 * time.Second})
	var log logLines
	if err := c.WaitResolvable(context.Background(), WaitOptions{
		Resolver: dns, Clock: clock, Logf: log.logf, LogEvery: 5 * time.Second, Retry: time.Second, TimeoutFlag: "--startup_timeout"}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"cannot resolve h0 (TF_CONFIG cluster.ps[0], the address of ps 0); retrying until --startup_timeout (5m0s): lookup h0: no such host",
		"cannot resolve h1 (TF_CONFIG cluster.ps[1], the address of ps 1); retrying until --startup_timeout (5m0s): lookup h1: no such host",
		"waiting for h0 (ps 0) to resolve: lookup h0: no such host (5s so far)",
		"waiting for h1 (ps 1) to resolve: lookup h1: no such host (5s so far)",
	}
	if !slices.Equal(log, want) {
		t.Errorf("log\n%s\nwant\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}
}

func TestWaitResolvableTimeout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flags    Flags
		tfConfig string
		source   string
		pieces   []string
	}{
		{"TF_CONFIG ps", Flags{}, `{"cluster":{"ps":["p0:2222","tfjob-ps-1.ns.svc:2222"],"worker":["w0:2222"]},"task":{"type":"worker","index":0}}`,
			"TF_CONFIG cluster.ps[1]", []string{`host "tfjob-ps-1.ns.svc" of ps 1 (tfjob-ps-1.ns.svc:2222) did not resolve within 1m0s`, "no such host"}},
		{"--ps_hosts", Flags{PSHosts: "p0:2222,p9:2222", PSHostsSet: true}, `{"cluster":{"worker":["w0:2222"]},"task":{"type":"worker"}}`,
			"--ps_hosts entry 2", []string{`host "p9" of ps 1 (p9:2222)`}},
		{"a ps its own name", Flags{}, `{"cluster":{"ps":["p0:2222","p9:2222"],"worker":["w0:2222"]},"task":{"type":"ps","index":1}}`,
			"TF_CONFIG cluster.ps[1]", []string{`host "p9" of ps 1`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Resolve(tc.flags, tc.tfConfig)
			if err != nil {
				t.Fatal(err)
			}
			dns, clock := newFakeDNS(map[string]time.Duration{"p0": 0})
			var log logLines
			err = c.WaitResolvable(context.Background(), WaitOptions{Resolver: dns, Clock: clock, Logf: log.logf, Timeout: time.Minute})
			wantErr(t, err, tc.source, tc.pieces...)
			if got := clock.now.Sub(dns.start); got != time.Minute {
				t.Errorf("gave up after %v, want 1m", got)
			}
			if len(log) != 12 || !strings.HasPrefix(log[0], "cannot resolve ") {
				t.Errorf("%d log lines in a minute at the default 5s, want 12 (cannot resolve at once, then 5s..55s; at 1m the error):\n%s", len(log), strings.Join(log, "\n"))
			}
			if dns.lookups["p0"] > 1 {
				t.Errorf("p0 resolved at once but was looked up %d times", dns.lookups["p0"])
			}
		})
	}
}

func TestWaitResolvableCancel(t *testing.T) {
	c := resolveTF(t, `{"cluster":{"ps":["h0:2222"],"worker":["w0:2222"]},"task":{"type":"worker"}}`)
	dns, clock := newFakeDNS(nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.WaitResolvable(ctx, WaitOptions{Resolver: dns, Clock: clock}); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

func TestNeedsFrom(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flags    Flags
		tfConfig string
		want     []Peer
	}{
		{"worker, TF_CONFIG", Flags{}, tfTwoWorkers, []Peer{
			{Task{"ps", 0}, "p0:1", "TF_CONFIG cluster.ps[0]"}, {Task{"ps", 1}, "p1:1", "TF_CONFIG cluster.ps[1]"}}},
		{"ps, flags", Flags{PSHosts: "a:1,b:1", WorkerHosts: "w:1", JobName: "ps", TaskIndex: 1, PSHostsSet: true, WorkerHostsSet: true, JobNameSet: true, TaskIndexSet: true},
			"", []Peer{{Task{"ps", 1}, "b:1", "--ps_hosts entry 2"}}},
		{"by hand", Flags{}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			if tc.want == nil {
				c = Config{Spec: Spec{PS: []string{"p:1"}, Workers: []string{"w:1"}}, Task: Task{"ps", 0}}
				tc.want = []Peer{{Task{"ps", 0}, "p:1", "Spec.PS[0]"}}
			} else {
				var err error
				if c, err = Resolve(tc.flags, tc.tfConfig); err != nil {
					t.Fatal(err)
				}
			}
			if got := c.Needs(); !slices.Equal(got, tc.want) {
				t.Errorf("Needs() = %v, want %v", got, tc.want)
			}
		})
	}
	c := resolveTF(t, tfChiefW1)
	want := []string{"TF_CONFIG cluster.chief[0]", "TF_CONFIG cluster.worker[0]", "TF_CONFIG cluster.worker[1]"}
	if !slices.Equal(c.From.Workers, want) {
		t.Errorf("From.Workers = %q, want %q", c.From.Workers, want)
	}
}
