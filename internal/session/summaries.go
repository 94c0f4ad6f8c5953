package session

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/tfevents"
)

// summaries are the chief's TensorBoard summaries of a program's own loop
// (Config.SummaryDir): the losses and examples it reports, summarised at
// its steps. loss and examples are set by ReportLoss, which may run while
// a call is in flight; the rest is the session goroutine's.
type summaries struct {
	s        *tfevents.Summaries
	opt      optim.Config
	changes  []optim.RateChange
	loss     atomic.Uint64 // math.Float64bits of the latest loss; NaN: none
	examples atomic.Int64  // reported since the last step
	closed   bool
}

// newSummaries opens the event file in cfg.SummaryDir for the chief, or
// returns nil for the other workers or without a directory.
func newSummaries(cfg Config) (*summaries, error) {
	if cfg.SummaryDir == "" || !cfg.Cluster.IsChief() {
		return nil, nil
	}
	w, err := tfevents.Create(cfg.SummaryDir, time.Now())
	if err != nil {
		return nil, fmt.Errorf("session: summary dir %s: %w", cfg.SummaryDir, err)
	}
	every := cfg.SaveSummariesSteps
	if every <= 0 {
		every = 100
	}
	cfg.Logf("summaries: %s every %d global steps", w.Path(), every)
	m := &summaries{s: &tfevents.Summaries{W: w, Every: every, Logf: cfg.Logf}, opt: cfg.Optimizer}
	m.loss.Store(math.Float64bits(math.NaN()))
	m.rate()
	return m, nil
}

// rate sets the learning rate summarised: the job's schedule with the
// changes made through this session.
func (m *summaries) rate() {
	if sched, err := optim.NewScheduled(m.opt, m.changes); err == nil {
		m.s.Rate = sched.Rate
	}
}

func (m *summaries) reported(loss float64, examples int) {
	m.loss.Store(math.Float64bits(loss))
	if examples > 0 {
		m.examples.Add(int64(examples))
	}
}

// stepped summarises a step of the program that ended at global step.
func (m *summaries) stepped(worker int, step int64, dropped bool) {
	m.s.Step(lifecycle.StepStats{Worker: worker, GlobalStep: step, Loss: math.Float64frombits(m.loss.Load()),
		Examples: int(m.examples.Swap(0)), Dropped: dropped})
}

func (m *summaries) changed(ch optim.RateChange) {
	m.changes = append(m.changes, ch)
	m.rate()
}

// close closes the event file, once.
func (m *summaries) close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	return m.s.W.Close()
}
