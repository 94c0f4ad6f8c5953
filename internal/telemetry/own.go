package telemetry

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Calls holds the metrics of a worker whose program runs its own loop
// (package session: the public Go API and the Python binding): each call
// to the ps counted and timed as the program sees it, its bytes, and the
// steps and losses the program reports, into the Worker's own metrics
// (steps, global step, loss, push+pull time), so that paramserv local's
// progress line and the status page read it as they read the built-in
// loop's.
type Calls struct {
	w                     *Worker
	calls, errors         *prometheus.CounterVec
	seconds               *prometheus.HistogramVec
	pushDense, pushSparse prometheus.Counter
	pullDense, pullSparse prometheus.Counter
	step                  atomic.Int64 // the global step of the values last pulled
	known                 map[string]callMetrics
}

// callMetrics are one call's series, looked up once.
type callMetrics struct {
	calls, errors prometheus.Counter
	seconds       prometheus.Observer
}

// callKinds are the calls session counts (Calls.Call's call).
var callKinds = []string{"pull", "push", "push_pull", "pull_rows", "push_rows", "pull_tables", "done"}

// Bytes are the bytes of one call: gradients pushed and values pulled,
// dense values or sparse rows (keys and values pushed, values pulled).
type Bytes struct {
	PushDense, PushSparse, PullDense, PullSparse int64
}

// NewCalls registers, beside w's metrics in reg, those of a program's own
// calls.
func NewCalls(reg *prometheus.Registry, w *Worker) *Calls {
	f := factory{reg: reg, sub: "worker"}
	c := &Calls{w: w}
	c.calls = f.counterVec("calls_total", "The program's calls to the ps, by call (pull, push, push_pull, pull_rows, push_rows, pull_tables, done), recoveries inside a call included.", "call")
	c.errors = f.counterVec("call_errors_total", "The program's calls that returned an error, by call.", "call")
	c.seconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "paramserv", Subsystem: "worker", Name: "call_seconds",
		Help: "Time of the program's calls as it waits for them, by call (synchronous waits and recoveries included).", Buckets: latencyBuckets}, []string{"call"})
	reg.MustRegister(c.seconds)
	push := f.counterVec("push_bytes_total", "Bytes of gradients the program pushed: dense values, or sparse rows' keys and values.", "kind")
	pull := f.counterVec("pull_bytes_total", "Bytes of values the program pulled: dense values, or sparse rows.", "kind")
	c.pushDense, c.pushSparse = push.WithLabelValues("dense"), push.WithLabelValues("sparse")
	c.pullDense, c.pullSparse = pull.WithLabelValues("dense"), pull.WithLabelValues("sparse")
	c.known = map[string]callMetrics{}
	for _, k := range callKinds {
		c.known[k] = c.metrics(k)
	}
	// No loss until the program reports one (Loss): NaN, which paramserv
	// local's progress line leaves out, where 0 read as a loss of 0.
	w.loss.Set(math.NaN())
	c.w.mu.Lock()
	c.w.last.Loss = math.NaN()
	c.w.mu.Unlock()
	return c
}

func (c *Calls) metrics(call string) callMetrics {
	return callMetrics{calls: c.calls.WithLabelValues(call), errors: c.errors.WithLabelValues(call), seconds: c.seconds.WithLabelValues(call)}
}

// Call counts one call of the program: its kind, bytes, time and error.
func (c *Calls) Call(call string, b Bytes, took time.Duration, err error) {
	m, ok := c.known[call]
	if !ok {
		m = c.metrics(call)
	}
	m.calls.Inc()
	m.seconds.Observe(took.Seconds())
	if err != nil {
		m.errors.Inc()
		return
	}
	add := func(ctr prometheus.Counter, n int64) {
		if n > 0 {
			ctr.Add(float64(n))
		}
	}
	add(c.pushDense, b.PushDense)
	add(c.pushSparse, b.PushSparse)
	add(c.pullDense, b.PullDense)
	add(c.pullSparse, b.PullSparse)
}

// Stepped counts one step of the program (a push+pull that returned):
// the worker's steps and global step, the push+pull's time (exchange) and
// the program's own time since its previous call returned (compute).
func (c *Calls) Stepped(worker int, global, local int64, compute, exchange time.Duration, dropped bool) {
	w := c.w
	c.At(global)
	w.steps.Inc()
	if compute > 0 {
		w.compute.Observe(compute.Seconds())
	}
	w.exchange.Observe(exchange.Seconds())
	if dropped {
		w.dropped.Inc()
	}
	w.mu.Lock()
	w.last.Worker, w.last.GlobalStep, w.last.LocalStep = worker, global, local
	w.last.Compute, w.last.Exchange, w.last.Dropped = compute, exchange, dropped
	if dropped {
		w.droppedN++
	}
	w.mu.Unlock()
}

// At records the global step of the values the program pulled last.
func (c *Calls) At(step int64) {
	c.step.Store(step)
	c.w.globalStep.Set(float64(step))
}

// Loss records the loss the program reports for its batch (at the global
// step of the values it pulled last), and the batch's examples (0: not
// counted). It may run while a call is in flight.
func (c *Calls) Loss(loss float64, examples int) {
	w, step := c.w, c.step.Load()
	w.loss.Set(loss)
	if examples > 0 {
		w.examples.Add(float64(examples))
	}
	w.curve.add(step, loss)
	w.mu.Lock()
	w.last.Loss = loss
	w.mu.Unlock()
}

// Recovered counts a recovery of the program's worker (a ps lost and
// waited for).
func (c *Calls) Recovered() { c.w.recoveries.Inc() }
