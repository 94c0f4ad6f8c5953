package progress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// clock is a test clock that moves only when told.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestMeterLogsAtMostEveryAndAtDone(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	var lines []string
	var last Update
	updates := 0
	m := &Meter{What: "loading data", Total: 10e6, Every: 5 * time.Second, Now: c.now,
		Logf:    func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) },
		Observe: func(u Update) { last = u; updates++ }}
	m.Start()
	for i := range 10 {
		c.t = c.t.Add(time.Second) // 1 MB a second
		m.AddRows(100)
		m.Add(1e6)
		if i == 1 && len(lines) != 0 {
			t.Fatalf("after 2s: %q, want no line before 5s", lines)
		}
	}
	// Lines at 5s and 10s only.
	want := []string{
		"loading data: 500 rows, 5.0 MB of 10.0 MB (50%), 1.0 MB/s, ETA 5s",
		"loading data: 1000 rows, 10.0 MB of 10.0 MB (100%), 1.0 MB/s",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if updates != 10 || last.Bytes != 10e6 || last.Rows != 1000 || last.Fraction() != 1 || last.Done {
		t.Fatalf("observer told %d times, last %+v", updates, last)
	}
	m.Done()
	if got, w := lines[len(lines)-1], "loading data: done: 1000 rows, 10.0 MB in 10s (1.0 MB/s)"; got != w {
		t.Fatalf("last line %q, want %q", got, w)
	}
	if !last.Done || last.Fraction() != 1 {
		t.Fatalf("after Done the observer has %+v", last)
	}
}

func TestMeterUnknownTotalAndReader(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	var lines []string
	m := &Meter{What: "restoring", Now: c.now, Logf: func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }}
	m.Start()
	r := m.Reader(&slowReader{r: bytes.NewReader(make([]byte, 3e6)), c: c, step: 3 * time.Second})
	n, err := io.Copy(io.Discard, r)
	if err != nil || n != 3e6 || m.Bytes() != 3e6 {
		t.Fatalf("copied %d (%v), meter has %d", n, err, m.Bytes())
	}
	if len(lines) == 0 || strings.Contains(lines[0], "%") || strings.Contains(lines[0], "ETA") {
		t.Fatalf("lines %q: want some, without a share or ETA (the total is unknown)", lines)
	}
	if u := (Update{Bytes: 5}); u.Fraction() != 0 {
		t.Fatalf("unknown total: fraction %v, want 0", u.Fraction())
	}
}

// slowReader moves the clock by step at every read of at most 64 KiB.
type slowReader struct {
	r    io.Reader
	c    *clock
	step time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	s.c.t = s.c.t.Add(s.step)
	return s.r.Read(p[:min(len(p), 64<<10)])
}

func TestQuietIfQuick(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	var lines []string
	m := &Meter{What: "x", Now: c.now, QuietIfQuick: true, Logf: func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }}
	m.Add(10)
	m.Done()
	if len(lines) != 0 {
		t.Fatalf("a quick read logged %q", lines)
	}
	c.t = c.t.Add(DefaultEvery)
	m.Add(10)
	m.Done()
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "x: done: ") {
		t.Fatalf("a slow read logged %q, want a progress line and the last line", lines)
	}
}

// A read through Reader stops with ErrStopped once Stop is closed, and
// reads as before while it is open.
func TestReaderStops(t *testing.T) {
	stop := make(chan struct{})
	m := &Meter{Stop: stop}
	r := m.Reader(strings.NewReader("abcdef"))
	buf := make([]byte, 3)
	if n, err := r.Read(buf); n != 3 || err != nil {
		t.Fatalf("read before Stop: %d, %v", n, err)
	}
	close(stop)
	if n, err := r.Read(buf); n != 0 || !errors.Is(err, ErrStopped) {
		t.Fatalf("read after Stop: %d, %v; want 0, ErrStopped", n, err)
	}
	if m.Bytes() != 3 {
		t.Errorf("counted %d bytes, want 3", m.Bytes())
	}
}
