// Package progress reports how far a long read has come: a worker loading
// a large data file, a ps restoring a large checkpoint shard. A Meter
// counts bytes (and rows, where the reader has them) as they are read and
// logs a line at most every Every, with the rate, the share of the total
// and the time left when the total is known, and a last line at Done:
//
//	loading data: 1200000 rows, 160.0 of 480.0 MB (33%), 52.1 MB/s, ETA 6s
//	loading data: done: 3600000 rows, 480.0 MB in 9.2s (52.2 MB/s)
//
// Its observer (metrics) is told every update, however often the log is.
// Time is an input (Now), so tests drive a Meter with their own clock.
//
// A Meter is used by one goroutine at a time (the reader's); its
// observer's own metrics are what other goroutines read.
package progress

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// DefaultEvery is how often a Meter logs when Every is 0.
const DefaultEvery = 5 * time.Second

// Update is a Meter's state, as its observer is told it.
type Update struct {
	What        string
	Bytes, Rows int64 // read so far
	Total       int64 // bytes expected; 0: unknown
	Done        bool  // the read has ended (Done was called)
}

// Fraction is Bytes/Total in [0, 1] (0 when the total is unknown; 1 once
// done).
func (u Update) Fraction() float64 {
	switch {
	case u.Done:
		return 1
	case u.Total <= 0:
		return 0
	}
	return min(float64(u.Bytes)/float64(u.Total), 1)
}

// Meter measures one read. Set its fields, then call Add (or read through
// Reader) and Done.
type Meter struct {
	// What names the read in its lines ("loading data").
	What string
	// Total is the bytes expected (0: unknown: no share, no ETA).
	Total int64
	// Every is the least time between two lines (DefaultEvery if 0).
	Every time.Duration
	// Now is the clock (time.Now if nil).
	Now func() time.Time
	// Logf receives the lines (nil: none).
	Logf func(format string, args ...any)
	// Observe, if set, is told every Add and the Done.
	Observe func(Update)
	// QuietIfQuick makes Done log nothing when no line came before (the
	// read took less than Every), for a caller that logs its own summary.
	QuietIfQuick bool
	// Stop, if not nil, ends a read through Reader once it is closed: the
	// next Read returns ErrStopped (a process told to stop gives up a long
	// load rather than finish it first).
	Stop <-chan struct{}

	started     bool
	start, last time.Time
	bytes, rows int64
	done        bool
	logged      bool // a line came
}

func (m *Meter) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

func (m *Meter) begin() {
	if !m.started {
		m.started = true
		m.start = m.now()
		m.last = m.start
	}
}

// Start starts the clock (the first Add does, if not called).
func (m *Meter) Start() { m.begin() }

// AddRows counts rows read; it does not look at the clock (a row is cheap,
// a clock reading is not): the next Add or Done reports them.
func (m *Meter) AddRows(n int64) { m.rows += n }

// Add counts bytes read and, once Every has passed since the last line,
// logs one.
func (m *Meter) Add(bytes int64) {
	m.begin()
	m.bytes += bytes
	if m.Observe != nil {
		m.Observe(m.update())
	}
	if m.Logf == nil {
		return
	}
	now := m.now()
	every := m.Every
	if every <= 0 {
		every = DefaultEvery
	}
	if now.Sub(m.last) < every {
		return
	}
	m.last = now
	m.logged = true
	m.Logf("%s", m.Line(now))
}

func (m *Meter) update() Update {
	return Update{What: m.What, Bytes: m.bytes, Rows: m.rows, Total: m.Total, Done: m.done}
}

// Bytes and Rows are the counts so far.
func (m *Meter) Bytes() int64 { return m.bytes }

// Rows is the rows counted so far.
func (m *Meter) Rows() int64 { return m.rows }

// Line is the progress line at now.
func (m *Meter) Line(now time.Time) string {
	s := m.What + ": "
	if m.rows > 0 {
		s += fmt.Sprintf("%d rows, ", m.rows)
	}
	el := now.Sub(m.start).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(m.bytes) / el
	}
	if m.Total > 0 {
		s += fmt.Sprintf("%s of %s (%.0f%%)", mb(m.bytes), mb(m.Total), 100*min(float64(m.bytes)/float64(m.Total), 1))
	} else {
		s += mb(m.bytes)
	}
	if rate > 0 {
		s += fmt.Sprintf(", %s/s", mb(int64(rate)))
		if left := m.Total - m.bytes; m.Total > 0 && left > 0 {
			s += ", ETA " + (time.Duration(float64(left) / rate * float64(time.Second))).Round(time.Second).String()
		}
	}
	return s
}

// Done ends the read: it logs the last line (rows, bytes, time, rate),
// whether or not a line came before, and tells the observer.
func (m *Meter) Done() {
	m.begin()
	m.done = true
	if m.Observe != nil {
		m.Observe(m.update())
	}
	if m.Logf == nil || (m.QuietIfQuick && !m.logged) {
		return
	}
	took := m.now().Sub(m.start)
	s := m.What + ": done: "
	if m.rows > 0 {
		s += fmt.Sprintf("%d rows, ", m.rows)
	}
	s += fmt.Sprintf("%s in %s", mb(m.bytes), took.Round(100*time.Millisecond))
	if took > 0 {
		s += fmt.Sprintf(" (%s/s)", mb(int64(float64(m.bytes)/took.Seconds())))
	}
	m.Logf("%s", s)
}

// Reader returns r counting into m every byte read through it.
func (m *Meter) Reader(r io.Reader) io.Reader { return &reader{r: r, m: m} }

type reader struct {
	r io.Reader
	m *Meter
}

// ErrStopped is a Reader's error once the Meter's Stop is closed.
var ErrStopped = errors.New("progress: the read was stopped (the process was told to stop)")

func (r *reader) Read(p []byte) (int, error) {
	select {
	case <-r.m.Stop:
		return 0, ErrStopped
	default:
	}
	n, err := r.r.Read(p)
	if n > 0 {
		r.m.Add(int64(n))
	}
	return n, err
}

// mb formats bytes in MB (10^6 bytes), as rates on disks are given, or
// in kB below a tenth of a MB.
func mb(n int64) string {
	if n < 1e5 {
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}
