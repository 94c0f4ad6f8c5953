// Command native is the C shared library that the Python package paramserv
// loads with ctypes: a thin binding over package session, so that placement,
// key hashing, the chief's Init, incarnations and recovery are the Go
// client's and are not written again in Python. Build it with
//
//	CGO_ENABLED=1 go build -buildmode=c-shared -o libparamserv.so ./python/native
//
// Every function takes a handle, an integer naming a session in a Go map
// (cgo forbids handing Go pointers to C); ps_push_pull_call takes a
// ps_call, a struct the caller fills once and passes at every step, the
// handle in it. A function returns 0 on success and -1 on failure, after
// which ps_error(h) is the message. Dense values
// pass as float** (one C-contiguous float32 buffer per variable, in the
// declared order) and sparse ones as uint64_t* keys and float* values;
// the library reads and writes them in place during the call and keeps no
// reference afterwards: no copies on the Python side. The exceptions are
// the *_start functions, which return a ticket before their call has
// run on a goroutine: its buffers are read and written until
// ps_ticket_wait says the call is over. In asynchronous training
// ps_push_pull_tables_start sends its request on the calling thread and
// the answers are read by the first thread to wait for the ticket (or by
// the next call), so that the ps work while the caller computes with no
// goroutine taking part. Every call waits for the background calls
// started before it.
//
// A process that forked after loading the library (a DataLoader worker)
// must not call into it: the Go runtime's threads do not survive a fork.
package main

/*
#include <stdint.h>
#include <stdlib.h>

// ps_call holds ps_push_pull_tables' arguments, so that a caller that makes
// the same call at every step (Python's Client.push_pull) fills it once,
// changes the fields that change, and passes one pointer: the library
// writes the new global step into step.
typedef struct {
	int64_t handle;
	float **grads;
	float **params;
	int32_t n;
	int32_t nt;
	char **tables;
	uint64_t **keys;
	int64_t *nkeys;
	float **row_grads;
	int32_t np;
	char **ptables;
	uint64_t **pkeys;
	int64_t *pnkeys;
	float **pout;
	int64_t step;
} ps_call;
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/secure"
	"github.com/paramserv/paramserv/internal/session"
	"github.com/paramserv/paramserv/internal/telemetry"
)

func main() {}

// jsonConfig is the configuration ps_open reads.
type jsonConfig struct {
	// TFConfig is the cluster in TF_CONFIG's form; empty means the
	// environment variable TF_CONFIG.
	TFConfig string `json:"tf_config"`
	// TFConfigSource names where TFConfig came from, for messages.
	TFConfigSource string `json:"tf_config_source"`
	Variables      []struct {
		Name      string        `json:"name"`
		Shape     []int         `json:"shape"`
		Optimizer *optim.Config `json:"optimizer"` // its own rule; nil: the job's
	} `json:"variables"`
	Tables []struct {
		Name            string        `json:"name"`
		Dim             int           `json:"dim"`
		Init            string        `json:"init"`
		InitStddev      float64       `json:"init_stddev"`
		Seed            uint64        `json:"seed"`
		MinCount        int64         `json:"min_count"`
		EvictAfterSteps int64         `json:"evict_after_steps"`
		Optimizer       *optim.Config `json:"optimizer"` // its own rule; nil: the job's
	} `json:"tables"`
	Optimizer           optim.Config `json:"optimizer"`
	Sync                bool         `json:"sync"`
	ReplicasToAggregate int          `json:"replicas_to_aggregate"`
	MaxStaleness        int64        `json:"max_staleness"`
	SplitBytes          int          `json:"split_bytes"`
	StartupTimeoutS     float64      `json:"startup_timeout_s"`
	RecoveryTimeoutS    float64      `json:"recovery_timeout_s"`
	CheckpointDir       string       `json:"checkpoint_dir"`
	SaveSteps           int64        `json:"save_steps"`
	SaveSecs            float64      `json:"save_secs"`
	Quiet               bool         `json:"quiet"`
	// Authentication, as the flags of the same names (the Python side
	// fills them from PARAMSERV_TLS_DIR, ... when not given).
	TLSDir        string `json:"tls_dir"`
	TLSCert       string `json:"tls_cert"`
	TLSKey        string `json:"tls_key"`
	TLSCA         string `json:"tls_ca"`
	AuthTokenFile string `json:"auth_token_file"`
	// MetricsAddr serves the worker's metrics there (session.Config);
	// the Python side fills it from PARAMSERV_METRICS_ADDR when not given.
	MetricsAddr string `json:"metrics_addr"`

	SummaryDir         string `json:"summary_dir"`
	SaveSummariesSteps int64  `json:"save_summaries_steps"`
}

// handle is one session and its last error.
type handle struct {
	mu   sync.Mutex // one call at a time
	cfg  session.Config
	s    *session.Session
	err  *C.char // the last error's message, owned by the handle
	dims map[string]int
	// live is s once started, for ps_report_loss, which runs without mu
	// (beside a push_pull in flight); addr is the metrics address.
	live atomic.Pointer[session.Session]
	addr *C.char

	// gmap and pmap are the maps of the calls made on the caller's
	// thread, reused from call to call (guarded by mu), and gptr and pptr
	// the buffers they hold: a program passes the same buffers every step,
	// and the maps are then left as they are.
	gmap, pmap model.Params
	gptr, pptr []*C.float

	// Calls running on goroutines of their own (ps_pull_rows_start), or
	// sent and not yet read (ps_push_pull_tables_start in async mode), by
	// ticket; tmu guards tickets, nextTicket, tail's writes and closing,
	// apart from mu, which such a call holds while it runs (a sent call
	// from its sending to its landing). tail is the latest of them, done
	// once it has returned (each waits for the one before it), so that a
	// call made after them runs after them; it is read without tmu.
	// running counts them for ps_close, which sets closing first.
	tmu        sync.Mutex
	tickets    map[int64]*ticket
	nextTicket int64
	tail       atomic.Pointer[link]
	closing    bool
	running    sync.WaitGroup
}

// ticket is a call running in the background: done is closed when it has
// returned, with step (a push+pull's) and err; msg is err's text for C,
// made on first demand and freed by ps_ticket_free.
type ticket struct {
	done chan struct{}
	step int64
	err  error
	msg  *C.char
	// land, for a call sent on the caller's thread (split), reads its
	// answers on the thread that calls it first and closes done; nil for
	// a call on a goroutine.
	land func()
}

// link is a call in the order of the calls on goroutines: done is closed
// once it has returned. A sent call's land reads its answers, on the
// calling thread, where a goroutine's call lands by itself.
type link struct {
	done chan struct{}
	land func()
}

// wait returns once the call of l has returned, landing it if it was sent
// and not yet read.
func (l *link) wait() {
	if l.land != nil {
		l.land()
	}
	<-l.done
}

// handles maps a handle's number to it. A call reads the map without a
// lock; ps_open and ps_close, holding mu, replace it with a copy.
var (
	mu      sync.Mutex // guards next and the writes of handles
	handles atomic.Pointer[map[int64]*handle]
	next    int64
)

// configured returns the handle hd for a call that starts work: nil and
// -2 for no such handle, nil and -1 when its configuration failed (its
// error stays for ps_error).
func configured(hd C.int64_t) (*handle, C.int64_t) {
	h := get(hd)
	if h == nil {
		return nil, -2
	}
	if h.cfg.Cluster.Task.Job == "" {
		return nil, -1
	}
	return h, 0
}

func get(h C.int64_t) *handle {
	if m := handles.Load(); m != nil {
		return (*m)[int64(h)]
	}
	return nil
}

// setHandle makes n name h, or nothing when h is nil; mu is held.
func setHandle(n int64, h *handle) {
	m := map[int64]*handle{}
	if old := handles.Load(); old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	if h == nil {
		delete(m, n)
	} else {
		m[n] = h
	}
	handles.Store(&m)
}

func (h *handle) fail(err error) C.int {
	if h.err != nil {
		C.free(unsafe.Pointer(h.err))
	}
	h.err = C.CString(err.Error())
	return -1
}

func parseConfig(text string) (session.Config, error) {
	var jc jsonConfig
	if err := json.Unmarshal([]byte(text), &jc); err != nil {
		return session.Config{}, fmt.Errorf("paramserv: configuration: %w", err)
	}
	tf := jc.TFConfig
	src := jc.TFConfigSource
	if src == "" {
		src = "the tf_config argument"
	}
	if tf == "" {
		tf, src = os.Getenv("TF_CONFIG"), "the TF_CONFIG environment variable"
	}
	if tf == "" {
		return session.Config{}, errors.New("paramserv: no cluster: want a tf_config argument or the TF_CONFIG environment variable, as `paramserv local -- CMD` sets it")
	}
	cl, err := cluster.Resolve(cluster.Flags{JobName: "worker"}, tf)
	if err != nil {
		return session.Config{}, fmt.Errorf("paramserv: cluster from %s: %w", src, err)
	}
	if cl.Task.Job != cluster.JobWorker {
		return session.Config{}, fmt.Errorf("paramserv: %s names task %s: want a worker task (the ps are paramserv processes)", src, cl.Task)
	}
	cfg := session.Config{
		Config: lifecycle.Config{
			Cluster:             cl,
			Optimizer:           jc.Optimizer,
			Sync:                jc.Sync,
			ReplicasToAggregate: jc.ReplicasToAggregate,
			MaxStaleness:        jc.MaxStaleness,
			SplitBytes:          jc.SplitBytes,
			StartupTimeout:      time.Duration(jc.StartupTimeoutS * float64(time.Second)),
			RecoveryTimeout:     time.Duration(jc.RecoveryTimeoutS * float64(time.Second)),
			CheckpointDir:       jc.CheckpointDir,
			SaveSteps:           jc.SaveSteps,
			SaveEvery:           time.Duration(jc.SaveSecs * float64(time.Second)),
		},
		MetricsAddr:        jc.MetricsAddr,
		SummaryDir:         jc.SummaryDir,
		SaveSummariesSteps: jc.SaveSummariesSteps,
		// Every call comes from a Python thread, its goroutine locked
		// to that thread (a cgo callback).
		ThreadReads: true,
	}
	auth, err := secure.Load(secure.Files{Dir: jc.TLSDir, Cert: jc.TLSCert, Key: jc.TLSKey, CA: jc.TLSCA, TokenFile: jc.AuthTokenFile}, string(cl.Task.Job), cl.Task.Index, "")
	if err != nil {
		return session.Config{}, fmt.Errorf("paramserv: %w", err)
	}
	cfg.Dial = auth.Dialer(cfg.Dial)
	for _, v := range jc.Variables {
		cfg.Variables = append(cfg.Variables, model.Variable{Name: v.Name, Shape: v.Shape, Optimizer: v.Optimizer})
	}
	for _, t := range jc.Tables {
		cfg.Tables = append(cfg.Tables, model.Table{Name: t.Name, Dim: t.Dim, Init: t.Init, InitStddev: t.InitStddev,
			Seed: t.Seed, MinCount: t.MinCount, EvictAfterSteps: t.EvictAfterSteps, Optimizer: t.Optimizer})
	}
	if !jc.Quiet {
		logger := log.New(os.Stderr, fmt.Sprintf("paramserv worker %d: ", cl.Task.Index), log.LstdFlags)
		cfg.Logf = logger.Printf
		for _, w := range cl.Warnings {
			logger.Printf("warning: %s", w)
		}
	}
	cfg.MetricsAddr = telemetry.ListenAddr(cfg.MetricsAddr, auth.Any(), cfg.Logf)
	return cfg, nil
}

// ps_open makes a handle from a JSON configuration. It returns the handle
// (> 0) even when the configuration is bad: then ps_error says why and
// every other call fails.
//
//export ps_open
func ps_open(cfgJSON *C.char) C.int64_t {
	h := &handle{dims: map[string]int{}, tickets: map[int64]*ticket{}}
	cfg, err := parseConfig(C.GoString(cfgJSON))
	if err != nil {
		h.fail(err)
	} else {
		h.cfg = cfg
		for _, t := range cfg.Tables {
			h.dims[t.Name] = t.Dim
		}
	}
	mu.Lock()
	defer mu.Unlock()
	next++
	setHandle(next, h)
	return C.int64_t(next)
}

// ps_error returns the handle's last error, or NULL. The string belongs to
// the handle and lives until its next failure or ps_close.
//
//export ps_error
func ps_error(hd C.int64_t) *C.char {
	h := get(hd)
	if h == nil {
		return nil
	}
	return h.err
}

// ps_worker returns the worker's index, ps_num_workers the workers', and
// ps_num_ps the ps tasks' count (-1 for an unknown or bad handle).
//
//export ps_worker
func ps_worker(hd C.int64_t) C.int {
	h := get(hd)
	if h == nil || h.cfg.Cluster.Task.Job == "" {
		return -1
	}
	return C.int(h.cfg.Cluster.Task.Index)
}

//export ps_num_workers
func ps_num_workers(hd C.int64_t) C.int {
	h := get(hd)
	if h == nil || h.cfg.Cluster.Task.Job == "" {
		return -1
	}
	return C.int(len(h.cfg.Cluster.Spec.Workers))
}

//export ps_num_ps
func ps_num_ps(hd C.int64_t) C.int {
	h := get(hd)
	if h == nil || h.cfg.Cluster.Task.Job == "" {
		return -1
	}
	return C.int(len(h.cfg.Cluster.Spec.PS))
}

// lock returns the handle locked, or nil (and h's error set) when it cannot
// be used.
func lock(hd C.int64_t, needSession bool) (*handle, C.int) {
	h := get(hd)
	if h == nil {
		return nil, -2
	}
	// After the background calls started before this call.
	if tail := h.tail.Load(); tail != nil {
		tail.wait()
	}
	h.mu.Lock()
	switch {
	case h.cfg.Cluster.Task.Job == "":
		h.mu.Unlock()
		return nil, -1 // the configuration's error stays
	case needSession && h.s == nil:
		h.fail(errors.New("paramserv: not started: call start first"))
		h.mu.Unlock()
		return nil, -1
	}
	return h, 0
}

// params makes Go slices over the caller's buffers, one per variable in the
// declared order (nil for n == 0 or a nil array).
func (h *handle) params(bufs **C.float, n C.int) (model.Params, error) {
	if bufs == nil {
		return nil, nil
	}
	vars := h.cfg.Variables
	if int(n) != len(vars) {
		return nil, fmt.Errorf("paramserv: %d buffers for %d variables", n, len(vars))
	}
	ptrs := unsafe.Slice(bufs, int(n))
	p := make(model.Params, len(vars))
	for i, v := range vars {
		if ptrs[i] == nil && v.Size() > 0 {
			return nil, fmt.Errorf("paramserv: buffer of variable %q is NULL", v.Name)
		}
		p[v.Name] = unsafe.Slice((*float32)(unsafe.Pointer(ptrs[i])), v.Size())
	}
	return p, nil
}

// reused is params, into *m, the map of the call before, which is left as
// it is when the buffers are that call's (*last); mu is held.
func (h *handle) reused(bufs **C.float, n C.int, m *model.Params, last *[]*C.float) (model.Params, error) {
	if bufs != nil && *m != nil && int(n) == len(*last) && slices.Equal(unsafe.Slice(bufs, int(n)), *last) {
		return *m, nil
	}
	p, err := h.params(bufs, n)
	if err != nil || p == nil {
		return p, err
	}
	*m, *last = p, append((*last)[:0], unsafe.Slice(bufs, int(n))...)
	return p, nil
}

// ps_start connects and waits for the ps; the chief passes its initial
// values (one buffer per variable), the others NULL and 0.
//
//export ps_start
func ps_start(hd C.int64_t, init **C.float, n C.int) C.int {
	h, rc := lock(hd, false)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	if h.s != nil {
		return h.fail(errors.New("paramserv: already started"))
	}
	p, err := h.params(init, n)
	if err != nil {
		return h.fail(err)
	}
	if h.cfg.Cluster.IsChief() && p == nil {
		return h.fail(errors.New("paramserv: the chief (worker 0) must pass the initial values to start"))
	}
	s, err := session.Start(callCtx(), h.cfg, p)
	if err != nil {
		return h.fail(err)
	}
	h.s = s
	h.live.Store(s)
	if a := s.MetricsAddr(); a != "" {
		h.addr = C.CString(a)
	}
	return 0
}

// ps_metrics_addr returns the address the worker's metrics are served at
// (HOST:PORT), or NULL when none (or before start). The string belongs to
// the handle and lives until ps_close.
//
//export ps_metrics_addr
func ps_metrics_addr(hd C.int64_t) *C.char {
	h, _ := lock(hd, true)
	if h == nil {
		return nil
	}
	defer h.mu.Unlock()
	return h.addr
}

// ps_report_loss records the loss of the program's latest batch and its
// examples (0: not counted) for the metrics; it does nothing without them.
// It does not wait for a call in flight.
//
//export ps_report_loss
func ps_report_loss(hd C.int64_t, loss C.double, examples C.int64_t) C.int {
	h := get(hd)
	if h == nil {
		return -2
	}
	s := h.live.Load()
	if s == nil {
		return -1
	}
	s.ReportLoss(float64(loss), int(examples))
	return 0
}

// ps_step returns the global step of the values last pulled (-1 before
// start).
//
//export ps_step
func ps_step(hd C.int64_t) C.int64_t {
	h, _ := lock(hd, true)
	if h == nil {
		return -1
	}
	defer h.mu.Unlock()
	return C.int64_t(h.s.Step())
}

// ps_is_sync returns 1 if the cluster trains synchronously, 0 if not, -1
// before start.
//
//export ps_is_sync
func ps_is_sync(hd C.int64_t) C.int {
	h, _ := lock(hd, true)
	if h == nil {
		return -1
	}
	defer h.mu.Unlock()
	if h.s.Sync() {
		return 1
	}
	return 0
}

// ps_pull reads every variable into params and stores the global step in
// *step.
//
//export ps_pull
func ps_pull(hd C.int64_t, params **C.float, n C.int, step *C.int64_t) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	p, err := h.params(params, n)
	if err == nil && p == nil {
		err = errors.New("paramserv: pull: no buffers")
	}
	if err != nil {
		return h.fail(err)
	}
	st, err := h.s.Pull(callCtx(), p)
	if step != nil {
		*step = C.int64_t(st)
	}
	if err != nil {
		return h.fail(err)
	}
	return 0
}

// ps_push_pull pushes grads computed at the session's step and pulls the
// next values into params.
//
//export ps_push_pull
func ps_push_pull(hd C.int64_t, grads, params **C.float, n C.int, step *C.int64_t) C.int {
	return ps_push_pull_rows(hd, grads, params, n, 0, nil, nil, nil, nil, step)
}

// ps_push_pull_rows is ps_push_pull that also pushes, in the same request,
// the gradients of rows of nt sparse tables: tables[i] names one, keys[i]
// holds its nkeys[i] distinct keys and rowGrads[i] their nkeys[i]×dim
// gradients.
//
//export ps_push_pull_rows
func ps_push_pull_rows(hd C.int64_t, grads, params **C.float, n C.int,
	nt C.int, tables **C.char, keys **C.uint64_t, nkeys *C.int64_t, rowGrads **C.float, step *C.int64_t) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	rows, g, p, err := h.pushPullArgs(true, grads, params, n, nt, tables, keys, nkeys, rowGrads)
	if err != nil {
		return h.fail(err)
	}
	st, err := h.s.PushPullRows(callCtx(), g, p, rows)
	if step != nil {
		*step = C.int64_t(st)
	}
	if err != nil {
		return h.fail(err)
	}
	return 0
}

// ps_push_pull_tables is ps_push_pull_rows that also reads, in the same
// request, the rows of np sparse tables: ptables[i] names one, pkeys[i]
// holds its pnkeys[i] distinct keys and pout[i] receives their
// pnkeys[i]×dim values, read after the push is applied (in sync mode once
// the step has completed). params may be NULL (n still counts grads).
//
//export ps_push_pull_tables
func ps_push_pull_tables(hd C.int64_t, grads, params **C.float, n C.int,
	nt C.int, tables **C.char, keys **C.uint64_t, nkeys *C.int64_t, rowGrads **C.float,
	np C.int, ptables **C.char, pkeys **C.uint64_t, pnkeys *C.int64_t, pout **C.float, step *C.int64_t) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	rows, g, p, err := h.pushPullArgs(true, grads, params, n, nt, tables, keys, nkeys, rowGrads)
	var pull []session.Rows
	if err == nil {
		pull, err = h.rowList("pull_rows", np, ptables, pkeys, pnkeys, pout)
	}
	if err != nil {
		return h.fail(err)
	}
	st, err := h.s.PushPullTables(callCtx(), g, p, rows, pull)
	if step != nil {
		*step = C.int64_t(st)
	}
	if err != nil {
		return h.fail(err)
	}
	return 0
}

// ps_push_pull_call is ps_push_pull_tables with its arguments in c, and
// the new global step written into c->step: -2 for a NULL c or an
// unknown handle.
//
//export ps_push_pull_call
func ps_push_pull_call(c *C.ps_call) C.int {
	if c == nil {
		return -2
	}
	return ps_push_pull_tables(c.handle, c.grads, c.params, C.int(c.n), C.int(c.nt), c.tables, c.keys, c.nkeys, c.row_grads,
		C.int(c.np), c.ptables, c.pkeys, c.pnkeys, c.pout, &c.step)
}

// ps_push pushes grads (and, as ps_push_pull_rows, the gradients of rows
// of nt tables) as this worker's step without reading values back; in sync
// mode it returns once the step has completed.
//
//export ps_push
func ps_push(hd C.int64_t, grads **C.float, n C.int,
	nt C.int, tables **C.char, keys **C.uint64_t, nkeys *C.int64_t, rowGrads **C.float, step *C.int64_t) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	rows, g, _, err := h.pushPullArgs(true, grads, nil, n, nt, tables, keys, nkeys, rowGrads)
	if err != nil {
		return h.fail(err)
	}
	st, err := h.s.Push(callCtx(), g, rows)
	if step != nil {
		*step = C.int64_t(st)
	}
	if err != nil {
		return h.fail(err)
	}
	return 0
}

// pushPullArgs makes Go slices over a push+pull's buffers (the handle's
// declaration is all it reads); params NULL for a push alone. With reuse,
// for a call made holding mu, the dense maps are the handle's.
func (h *handle) pushPullArgs(reuse bool, grads, params **C.float, n C.int,
	nt C.int, tables **C.char, keys **C.uint64_t, nkeys *C.int64_t, rowGrads **C.float) ([]session.Rows, model.Params, model.Params, error) {
	rows, err := h.rowList("rows", nt, tables, keys, nkeys, rowGrads)
	if err != nil {
		return nil, nil, nil, err
	}
	var g, p model.Params
	if reuse {
		g, err = h.reused(grads, n, &h.gmap, &h.gptr)
	} else {
		g, err = h.params(grads, n)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if reuse {
		p, err = h.reused(params, n, &h.pmap, &h.pptr)
	} else {
		p, err = h.params(params, n)
	}
	if err == nil && ((p == nil && params != nil) || g == nil) {
		err = errors.New("paramserv: push_pull: no buffers")
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return rows, g, p, nil
}

// rowList makes Go slices over nt tables' rows (what names the list in
// errors).
func (h *handle) rowList(what string, nt C.int, tables **C.char, keys **C.uint64_t, nkeys *C.int64_t, values **C.float) ([]session.Rows, error) {
	if nt <= 0 {
		return nil, nil
	}
	if tables == nil || keys == nil || nkeys == nil || values == nil {
		return nil, fmt.Errorf("paramserv: push_pull: NULL %s arrays", what)
	}
	ts, ks, ns, vs := unsafe.Slice(tables, int(nt)), unsafe.Slice(keys, int(nt)), unsafe.Slice(nkeys, int(nt)), unsafe.Slice(values, int(nt))
	rows := make([]session.Rows, 0, int(nt))
	for i := range ts {
		name, k, v, err := h.rows(ts[i], ks[i], ns[i], vs[i])
		if err != nil {
			return nil, err
		}
		rows = append(rows, session.Rows{Table: name, Keys: k, Values: v})
	}
	return rows, nil
}

func (h *handle) rows(table *C.char, keys *C.uint64_t, nkeys C.int64_t, values *C.float) (string, []uint64, []float32, error) {
	name := C.GoString(table)
	dim, ok := h.dims[name]
	if !ok {
		return "", nil, nil, fmt.Errorf("paramserv: unknown table %q", name)
	}
	if nkeys == 0 {
		return name, nil, nil, nil
	}
	if keys == nil || values == nil {
		return "", nil, nil, errors.New("paramserv: NULL keys or values")
	}
	return name, unsafe.Slice((*uint64)(unsafe.Pointer(keys)), int(nkeys)),
		unsafe.Slice((*float32)(unsafe.Pointer(values)), int(nkeys)*dim), nil
}

// ps_pull_rows reads the rows of nkeys distinct keys of table into out
// (nkeys×dim floats).
//
//export ps_pull_rows
func ps_pull_rows(hd C.int64_t, table *C.char, keys *C.uint64_t, nkeys C.int64_t, out *C.float) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	name, k, v, err := h.rows(table, keys, nkeys, out)
	if err == nil && len(k) > 0 {
		err = h.s.PullRows(callCtx(), name, k, v)
	}
	if err != nil {
		return h.fail(err)
	}
	return 0
}

// ps_pull_rows_start starts ps_pull_rows on a goroutine and returns at once
// with a ticket (> 0) for ps_ticket_wait, or -1 (ps_error) for a handle
// whose configuration failed and -2 for an unknown or closing one. keys
// and out must stay valid, and out unread, until ps_ticket_wait returns 0
// or -1 for the ticket. Every call made after it on the handle (another
// thread's too) runs after it: the pulls started so far form a queue that
// each call waits for (lock). Errors, including bad arguments, are the
// ticket's (ps_ticket_error).
//
//export ps_pull_rows_start
func ps_pull_rows_start(hd C.int64_t, table *C.char, keys *C.uint64_t, nkeys C.int64_t, out *C.float) C.int64_t {
	h, code := configured(hd)
	if h == nil {
		return code
	}
	name, k, v, err := h.rows(table, keys, nkeys, out)
	return h.background("pull_rows", err, func(s *session.Session) (int64, error) {
		if len(k) == 0 {
			return 0, nil
		}
		return 0, s.PullRowsAside(callCtx(), name, k, v)
	})
}

// ps_push_pull_rows_start starts ps_push_pull_rows on a goroutine, as
// ps_pull_rows_start does: the buffers must stay valid, and params unread,
// until ps_ticket_wait returns 0 or -1 for the ticket; ps_ticket_step then
// gives the new global step.
//
//export ps_push_pull_rows_start
func ps_push_pull_rows_start(hd C.int64_t, grads, params **C.float, n C.int,
	nt C.int, tables **C.char, keys **C.uint64_t, nkeys *C.int64_t, rowGrads **C.float) C.int64_t {
	h, code := configured(hd)
	if h == nil {
		return code
	}
	rows, g, p, err := h.pushPullArgs(false, grads, params, n, nt, tables, keys, nkeys, rowGrads)
	return h.background("push_pull", err, func(s *session.Session) (int64, error) {
		return s.PushPullRows(callCtx(), g, p, rows)
	})
}

// ps_push_pull_tables_start starts ps_push_pull_tables on a goroutine, as
// ps_push_pull_rows_start does: the buffers must stay valid, and params
// and pout unread, until ps_ticket_wait returns 0 or -1 for the ticket.
//
//export ps_push_pull_tables_start
func ps_push_pull_tables_start(hd C.int64_t, grads, params **C.float, n C.int,
	nt C.int, tables **C.char, keys **C.uint64_t, nkeys *C.int64_t, rowGrads **C.float,
	np C.int, ptables **C.char, pkeys **C.uint64_t, pnkeys *C.int64_t, pout **C.float) C.int64_t {
	h, code := configured(hd)
	if h == nil {
		return code
	}
	rows, g, p, err := h.pushPullArgs(false, grads, params, n, nt, tables, keys, nkeys, rowGrads)
	var pull []session.Rows
	if err == nil {
		pull, err = h.rowList("pull_rows", np, ptables, pkeys, pnkeys, pout)
	}
	if err == nil {
		if s := h.live.Load(); s != nil && !s.Sync() {
			return h.split(func(s *session.Session) *session.Sent {
				return s.SendPushPullTables(callCtx(), g, p, rows, pull)
			})
		}
	}
	return h.background("push_pull", err, func(s *session.Session) (int64, error) {
		return s.PushPullTables(callCtx(), g, p, rows, pull)
	})
}

// split starts a call in two halves, after the calls started before it:
// send sends it on the calling thread, holding the handle's lock, and the
// ticket's land reads its answers, on the thread that first waits for it
// (ps_ticket_wait, or a later call, which lands it first) and unlocks.
// Between the two the ps work on it while the caller computes, and no
// goroutine or other thread takes part (session.SendPushPullTables). It
// returns the ticket, or -2 if the handle is closing.
func (h *handle) split(send func(*session.Session) *session.Sent) C.int64_t {
	t := &ticket{done: make(chan struct{})}
	mine := &link{done: make(chan struct{})}
	sent := make(chan struct{}) // closed once sending is over
	var (
		p    *session.Sent
		once sync.Once
	)
	mine.land = func() {
		<-sent
		once.Do(func() {
			if p != nil {
				t.step, t.err = p.Land()
			}
			h.mu.Unlock()
			close(t.done)
			close(mine.done)
			h.running.Done()
		})
	}
	t.land = mine.land
	id, prev, ok := h.enqueue(t, mine)
	if !ok {
		return -2
	}
	if prev != nil {
		prev.wait()
	}
	h.mu.Lock()
	if h.s == nil {
		t.err = errors.New("paramserv: push_pull: the client was closed first")
	} else {
		p = send(h.s)
	}
	close(sent)
	return C.int64_t(id)
}

// background runs call on a goroutine, after the calls started before it
// and holding the handle's lock, and returns its ticket (-2 if the handle
// is closing); a non-nil err (bad arguments) fails the ticket instead.
func (h *handle) background(what string, err error, call func(*session.Session) (int64, error)) C.int64_t {
	if err == nil && h.live.Load() == nil {
		err = errors.New("paramserv: not started: call start first")
	}
	t := &ticket{done: make(chan struct{})}
	mine := &link{done: make(chan struct{})}
	id, prev, ok := h.enqueue(t, mine)
	if !ok {
		return -2
	}
	go func() {
		defer h.running.Done()
		defer close(t.done)
		defer close(mine.done)
		if prev != nil {
			prev.wait()
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		switch {
		case err != nil:
			t.err = err
		case h.s == nil:
			t.err = fmt.Errorf("paramserv: %s: the client was closed first", what)
		default:
			t.step, t.err = call(h.s)
		}
	}()
	return C.int64_t(id)
}

// enqueue registers ticket t under a new id, counts it running and puts
// its link last in the order of calls, returning the link before it (nil
// if none); ok is false, and nothing registered, if the handle is closing.
func (h *handle) enqueue(t *ticket, mine *link) (id int64, prev *link, ok bool) {
	h.tmu.Lock()
	defer h.tmu.Unlock()
	if h.closing {
		return 0, nil, false
	}
	h.nextTicket++
	id = h.nextTicket
	h.tickets[id] = t
	h.running.Add(1)
	return id, h.tail.Swap(mine), true
}

// ps_ticket_step returns the global step a ticket's push+pull returned
// (0 for a pull, -1 while it runs or for an unknown ticket).
//
//export ps_ticket_step
func ps_ticket_step(hd C.int64_t, id C.int64_t) C.int64_t {
	h := get(hd)
	if h == nil {
		return -1
	}
	t := h.ticket(id)
	if t == nil {
		return -1
	}
	select {
	case <-t.done:
		return C.int64_t(t.step)
	default:
		return -1
	}
}

func (h *handle) ticket(id C.int64_t) *ticket {
	h.tmu.Lock()
	defer h.tmu.Unlock()
	return h.tickets[int64(id)]
}

// ps_ticket_wait waits up to timeoutS seconds (for ever if negative) for
// the call of a ticket to return: 0 it succeeded, -1 it failed
// (ps_ticket_error), 1 it is still running, -2 unknown handle or ticket.
//
//export ps_ticket_wait
func ps_ticket_wait(hd C.int64_t, id C.int64_t, timeoutS C.double) C.int {
	h := get(hd)
	if h == nil {
		return -2
	}
	t := h.ticket(id)
	if t == nil {
		return -2
	}
	switch {
	case timeoutS < 0:
		if t.land != nil {
			t.land() // a sent call: read here, on the caller's thread
		}
		<-t.done
	case t.land != nil:
		// A sent call asked with a time limit (or polled): read on a
		// goroutine, so that the wait can end first and a poll sees the
		// call end.
		go t.land()
		fallthrough
	default:
		timer := time.NewTimer(time.Duration(float64(timeoutS) * float64(time.Second)))
		defer timer.Stop()
		select {
		case <-t.done:
		case <-timer.C:
			select {
			case <-t.done:
			default:
				return 1
			}
		}
	}
	if t.err != nil {
		return -1
	}
	return 0
}

// ps_ticket_error returns the error of a ticket's call that failed, or NULL
// (running, succeeded, or unknown). The string lives until ps_ticket_free.
//
//export ps_ticket_error
func ps_ticket_error(hd C.int64_t, id C.int64_t) *C.char {
	h := get(hd)
	if h == nil {
		return nil
	}
	h.tmu.Lock()
	defer h.tmu.Unlock()
	t := h.tickets[int64(id)]
	if t == nil {
		return nil
	}
	select {
	case <-t.done:
	default:
		return nil
	}
	if t.err == nil {
		return nil
	}
	if t.msg == nil {
		t.msg = C.CString(t.err.Error())
	}
	return t.msg
}

// ps_ticket_free forgets a ticket whose call has returned (0); it returns
// 1 and keeps it while the call runs, -2 for an unknown one.
//
//export ps_ticket_free
func ps_ticket_free(hd C.int64_t, id C.int64_t) C.int {
	h := get(hd)
	if h == nil {
		return -2
	}
	h.tmu.Lock()
	defer h.tmu.Unlock()
	t := h.tickets[int64(id)]
	if t == nil {
		return -2
	}
	select {
	case <-t.done:
	default:
		return 1
	}
	if t.msg != nil {
		C.free(unsafe.Pointer(t.msg))
	}
	delete(h.tickets, int64(id))
	return 0
}

// ps_push_rows pushes gradients (nkeys×dim floats) for the rows of nkeys
// distinct keys of table.
//
//export ps_push_rows
func ps_push_rows(hd C.int64_t, table *C.char, keys *C.uint64_t, nkeys C.int64_t, grads *C.float) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	name, k, v, err := h.rows(table, keys, nkeys, grads)
	if err == nil && len(k) > 0 {
		err = h.s.PushRows(callCtx(), name, k, v)
	}
	if err != nil {
		return h.fail(err)
	}
	return 0
}

// ps_change_rate changes the job's learning rate and schedule on every ps
// from global step from on (the chief only).
//
//export ps_change_rate
func ps_change_rate(hd C.int64_t, from C.int64_t, lr C.double, schedule *C.char) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	ctx, cancel := context.WithTimeout(callCtx(), 30*time.Second)
	defer cancel()
	ch := optim.RateChange{From: int64(from), LearningRate: float64(lr), Schedule: C.GoString(schedule)}
	if err := h.s.ChangeRate(ctx, ch); err != nil {
		return h.fail(err)
	}
	return 0
}

// ps_done tells every ps this worker has finished.
//
//export ps_done
func ps_done(hd C.int64_t) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	ctx, cancel := context.WithTimeout(callCtx(), 30*time.Second)
	defer cancel()
	if err := h.s.Done(ctx); err != nil {
		return h.fail(err)
	}
	return 0
}

// interrupts is the context of the calls in flight, cancelled when the
// process receives SIGINT (ps_watch_interrupts): a call waiting in Go
// (a synchronous step that waits for the other workers, a recovery) holds
// the Python thread that called it, which sees Ctrl-C only once the call
// returns.
// A call reads cur without the lock; mu orders its replacements.
var interrupts struct {
	mu  sync.Mutex
	cur atomic.Pointer[callScope]
}

// callScope is a context and its cancel.
type callScope struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// callCtx is the context a call starts with: cancelled by the next SIGINT.
func callCtx() context.Context {
	if c := interrupts.cur.Load(); c != nil {
		return c.ctx
	}
	interrupts.mu.Lock()
	defer interrupts.mu.Unlock()
	if c := interrupts.cur.Load(); c != nil {
		return c.ctx
	}
	ctx, cancel := context.WithCancel(context.Background())
	interrupts.cur.Store(&callScope{ctx: ctx, cancel: cancel})
	return ctx
}

// interrupt cancels the calls in flight; the calls made after it start
// afresh.
func interrupt() {
	interrupts.mu.Lock()
	defer interrupts.mu.Unlock()
	if c := interrupts.cur.Swap(nil); c != nil {
		c.cancel()
	}
}

// ps_watch_interrupts reads the signal numbers Python writes to its wakeup
// fd (signal.set_wakeup_fd) from fd, the read end of that pipe, which the
// library then owns: each SIGINT cancels the calls in flight on every
// handle, which fail (in Python, the KeyboardInterrupt is raised as they
// return). It returns 0, or -1 for a bad fd.
//
//export ps_watch_interrupts
func ps_watch_interrupts(fd C.int) C.int {
	f := os.NewFile(uintptr(fd), "paramserv-interrupts")
	if f == nil {
		return -1
	}
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := f.Read(buf)
			for _, b := range buf[:n] {
				if b == byte(syscall.SIGINT) {
					interrupt()
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return 0
}

// ps_close closes the session and forgets the handle.
//
//export ps_close
func ps_close(hd C.int64_t) C.int {
	mu.Lock()
	h := get(hd)
	if h != nil {
		setHandle(int64(hd), nil)
	}
	mu.Unlock()
	if h == nil {
		return -2
	}
	// Calls on goroutines of their own finish first: they write into the
	// caller's buffers.
	h.tmu.Lock()
	h.closing = true
	h.tmu.Unlock()
	if tail := h.tail.Load(); tail != nil {
		tail.wait() // a call sent and not yet read is read here
	}
	h.running.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	var err error
	h.live.Store(nil)
	for id, t := range h.tickets {
		if t.msg != nil {
			C.free(unsafe.Pointer(t.msg))
		}
		delete(h.tickets, id)
	}
	if h.s != nil {
		err = h.s.Close()
		h.s = nil
	}
	if h.addr != nil {
		C.free(unsafe.Pointer(h.addr))
		h.addr = nil
	}
	if h.err != nil {
		C.free(unsafe.Pointer(h.err))
		h.err = nil
	}
	if err != nil {
		return -1
	}
	return 0
}
