package telemetry

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paramserv/paramserv/internal/progress"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// PS holds a ps's metrics. It implements server.Observer; Watch adds what
// is read from the server when scraped.
type PS struct {
	reg *prometheus.Registry

	pushes                 *prometheus.CounterVec
	applied, accumulated   prometheus.Counter
	completed, stale, dups prometheus.Counter
	pushDense, pushSparse  prometheus.Counter
	pulls                  prometheus.Counter
	pullDense, pullSparse  prometheus.Counter
	pushSeconds            prometheus.Histogram
	pullSeconds            prometheus.Histogram
	syncWait               prometheus.Histogram
	rejected               *prometheus.CounterVec

	saveSeconds, restoreSeconds prometheus.Histogram
	saveBytes, restoreBytes     prometheus.Counter
	saveFailures                prometheus.Counter
	restores                    *prometheus.CounterVec
	restoreFailures             prometheus.Counter
	restoreRead                 prometheus.Counter
	restoreProgress             prometheus.Gauge

	mu          sync.Mutex
	state       func() PSState
	restoreLast progress.Update // the latest RestoreProgress, guarded by mu
}

var _ server.Observer = (*PS)(nil)

// PSState is what a ps reports at a scrape: its Status, and when each
// worker was last heard from.
type PSState struct {
	Status   *pb.StatusResponse
	LastSeen map[int]time.Time
}

// NewPS registers a ps's metrics in reg.
func NewPS(reg *prometheus.Registry) *PS {
	f := factory{reg: reg, sub: "ps"}
	p := &PS{reg: reg}
	p.pushes = f.counterVec("pushes_total", "Pushes checked, by the tracker's verdict: applied (async), accumulated or completed (a synchronous step's gradient, the last one completing the step), stale or duplicate (dropped).", "verdict")
	p.applied = p.pushes.WithLabelValues("applied")
	p.accumulated = p.pushes.WithLabelValues("accumulated")
	p.completed = p.pushes.WithLabelValues("completed")
	p.stale = p.pushes.WithLabelValues("stale")
	p.dups = p.pushes.WithLabelValues("duplicate")
	pushBytes := f.counterVec("push_bytes_total", "Bytes of gradients received in pushes: dense values, or sparse rows' keys and values.", "kind")
	p.pushDense, p.pushSparse = pushBytes.WithLabelValues("dense"), pushBytes.WithLabelValues("sparse")
	p.pulls = f.counter("pulls_total", "Pulls answered (a push+pull counts as a push and a pull).")
	pullBytes := f.counterVec("pull_bytes_total", "Bytes of values sent in pulls: dense values, or sparse rows.", "kind")
	p.pullDense, p.pullSparse = pullBytes.WithLabelValues("dense"), pullBytes.WithLabelValues("sparse")
	p.pushSeconds = f.histogram("push_apply_seconds", "Time to check and apply (or accumulate, or drop) a push, under the shard's lock.", latencyBuckets)
	p.pullSeconds = f.histogram("pull_seconds", "Time from a pull's request to its reply made, any wait for its step included.", latencyBuckets)
	p.syncWait = f.histogram("sync_wait_seconds", "Time a pull waited for its step (synchronous training: the other workers' gradients).", latencyBuckets)
	p.rejected = f.counterVec("rejected_pushes_total", "Pushes refused before anything was applied, by reason (invalid_request, not_ready, behind, ...).", "reason")
	p.saveSeconds = f.histogram("checkpoint_save_seconds", "Time to write this ps's shard of a checkpoint.", checkpointBuckets)
	p.saveBytes = f.counter("checkpoint_save_bytes_total", "Bytes of checkpoint shard files written.")
	p.saveFailures = f.counter("checkpoint_save_failures_total", "Checkpoint shards this ps failed to write.")
	p.restoreSeconds = f.histogram("checkpoint_restore_seconds", "Time to read a checkpoint and build this ps's state from it.", checkpointBuckets)
	p.restoreBytes = f.counter("checkpoint_restore_bytes_total", "Bytes of checkpoint shard files read by restores.")
	p.restores = f.counterVec("restores_total", "Checkpoints restored: at start (a restarted ps) or at the chief's request (a rollback in recovery).", "trigger")
	p.restoreFailures = f.counter("checkpoint_restore_failures_total", "Restores that failed.")
	p.restoreRead = f.counter("restore_read_bytes_total", "Bytes of checkpoint shard files read by restores as they are read (at start, the newest checkpoint's verification too).")
	p.restoreProgress = f.gauge("restore_progress_ratio", "How far the latest restore has come: bytes read of the shard files it reads, 1 once restored.")
	return p
}

// Pushed implements server.Observer.
func (p *PS) Pushed(verdict string, dense, sparse int, took time.Duration) {
	switch verdict {
	case "apply":
		p.applied.Inc()
	case "accumulate":
		p.accumulated.Inc()
	case "complete":
		p.completed.Inc()
	case "drop-stale":
		p.stale.Inc()
	case "drop-duplicate":
		p.dups.Inc()
	default:
		p.pushes.WithLabelValues(labelValue(verdict)).Inc()
	}
	if dense > 0 {
		p.pushDense.Add(float64(dense))
	}
	if sparse > 0 {
		p.pushSparse.Add(float64(sparse))
	}
	p.pushSeconds.Observe(took.Seconds())
}

// Rejected implements server.Observer.
func (p *PS) Rejected(reason string) { p.rejected.WithLabelValues(labelValue(reason)).Inc() }

// Pulled implements server.Observer.
func (p *PS) Pulled(dense, sparse int, took time.Duration) {
	p.pulls.Inc()
	if dense > 0 {
		p.pullDense.Add(float64(dense))
	}
	if sparse > 0 {
		p.pullSparse.Add(float64(sparse))
	}
	p.pullSeconds.Observe(took.Seconds())
}

// SyncWaited implements server.Observer.
func (p *PS) SyncWaited(d time.Duration) { p.syncWait.Observe(d.Seconds()) }

// CheckpointSaved implements server.Observer.
func (p *PS) CheckpointSaved(bytes int64, took time.Duration, err error) {
	if err != nil {
		p.saveFailures.Inc()
		return
	}
	p.saveSeconds.Observe(took.Seconds())
	p.saveBytes.Add(float64(bytes))
}

// CheckpointRestored implements server.Observer.
func (p *PS) CheckpointRestored(atStart bool, bytes int64, took time.Duration, err error) {
	if err != nil {
		p.restoreFailures.Inc()
		return
	}
	trigger := "rollback"
	if atStart {
		trigger = "start"
	}
	p.restores.WithLabelValues(trigger).Inc()
	p.restoreSeconds.Observe(took.Seconds())
	p.restoreBytes.Add(float64(bytes))
}

// RestoreProgress implements server.Observer.
func (p *PS) RestoreProgress(u progress.Update) {
	p.mu.Lock()
	prev := p.restoreLast
	if u.Bytes < prev.Bytes || prev.Done || u.What != prev.What {
		prev = progress.Update{}
	}
	p.restoreLast = u
	p.mu.Unlock()
	if d := u.Bytes - prev.Bytes; d > 0 {
		p.restoreRead.Add(float64(d))
	}
	if u.Total > 0 || u.Done {
		p.restoreProgress.Set(u.Fraction())
	}
}

// Watch registers the metrics read from the ps at each scrape: state
// returns its status then.
func (p *PS) Watch(state func() PSState) {
	p.mu.Lock()
	first := p.state == nil
	p.state = state
	p.mu.Unlock()
	if first {
		p.reg.MustRegister(psCollector{p})
	}
}

// State returns what the watched ps reports now (a zero PSState before
// Watch).
func (p *PS) State() PSState {
	p.mu.Lock()
	f := p.state
	p.mu.Unlock()
	if f == nil {
		return PSState{}
	}
	return f()
}

var (
	descStep        = prometheus.NewDesc("paramserv_ps_global_step", "The shard's global step.", nil, nil)
	descRate        = prometheus.NewDesc("paramserv_ps_learning_rate", "The job's rule's learning rate in force for the next update, under its schedule and the chief's changes.", nil, nil)
	descInit        = prometheus.NewDesc("paramserv_ps_initialized", "1 once the shard holds variables (the chief's Init or a restore).", nil, nil)
	descIncarnation = prometheus.NewDesc("paramserv_ps_incarnation", "The shard's incarnation: it changes with every restore.", nil, nil)
	descWorkers     = prometheus.NewDesc("paramserv_ps_workers", "Workers in the cluster.", nil, nil)
	descDone        = prometheus.NewDesc("paramserv_ps_workers_done", "Workers that have finished.", nil, nil)
	descLastSeen    = prometheus.NewDesc("paramserv_ps_worker_last_request_age_seconds", "Seconds since the ps last heard from the worker (a push, a pull, Init or Done).", []string{"worker"}, nil)
	descRows        = prometheus.NewDesc("paramserv_ps_table_rows", "Rows of a sparse table on this ps.", []string{"table"}, nil)
	descTableBytes  = prometheus.NewDesc("paramserv_ps_table_bytes", "Bytes of a sparse table's rows and optimizer state on this ps.", []string{"table"}, nil)
	descAdmitted    = prometheus.NewDesc("paramserv_ps_table_admitted_rows_total", "Rows admitted to a sparse table (since the last restore).", []string{"table"}, nil)
	descEvicted     = prometheus.NewDesc("paramserv_ps_table_evicted_rows_total", "Rows evicted from a sparse table after --evict_after_steps idle steps (since the last restore).", []string{"table"}, nil)
	descRefused     = prometheus.NewDesc("paramserv_ps_table_admission_refusals_total", "Touches of keys not yet admitted (--min_count) (since the last restore).", []string{"table"}, nil)
)

// psCollector reads the ps's status at a scrape.
type psCollector struct{ p *PS }

func (c psCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descStep, descRate, descInit, descIncarnation, descWorkers, descDone, descLastSeen, descRows, descTableBytes, descAdmitted, descEvicted, descRefused} {
		ch <- d
	}
}

func (c psCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.p.State()
	s := st.Status
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	init := 0.0
	if s.Initialized {
		init = 1
	}
	gauge(descStep, float64(s.GlobalStep))
	if s.Initialized {
		gauge(descRate, s.LearningRate)
	}
	gauge(descInit, init)
	gauge(descIncarnation, float64(s.Incarnation))
	gauge(descWorkers, float64(s.NumWorkers))
	gauge(descDone, float64(s.WorkersDone))
	now := time.Now()
	for w, t := range st.LastSeen {
		gauge(descLastSeen, now.Sub(t).Seconds(), strconv.Itoa(w))
	}
	for _, t := range s.Tables {
		gauge(descRows, float64(t.Rows), t.Name)
		gauge(descTableBytes, float64(t.Bytes), t.Name)
		counter(descAdmitted, float64(t.Admitted), t.Name)
		counter(descEvicted, float64(t.Evicted), t.Name)
		counter(descRefused, float64(t.RejectedByAdmission), t.Name)
	}
}

// labelValue makes a reason or verdict a label value: lower case, words
// joined by underscores.
func labelValue(s string) string {
	return strings.NewReplacer(" ", "_", "-", "_").Replace(strings.ToLower(s))
}

// factory makes and registers metrics of one subsystem.
type factory struct {
	reg *prometheus.Registry
	sub string
}

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "paramserv", Subsystem: f.sub, Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "paramserv", Subsystem: f.sub, Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "paramserv", Subsystem: f.sub, Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "paramserv", Subsystem: f.sub, Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "paramserv", Subsystem: f.sub, Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}
