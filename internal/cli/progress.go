package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/paramserv/paramserv/internal/telemetry"
)

// progress shows how far a `paramserv local` job is: global step of
// --train_steps, steps per second, the time left and the latest loss, read
// from the chief's metrics endpoint (its URL from the chief's own
// "metrics: URL" line). On a terminal it keeps one live line under the
// processes' output, redrawn every second; otherwise it writes a plain
// line every `every`. It passes every line of output through unchanged.
type progress struct {
	out        io.Writer
	tty        bool
	every      time.Duration
	trainSteps int64
	scrape     func(ctx context.Context, url string) (telemetry.Families, error)
	now        func() time.Time

	mu       sync.Mutex
	streams  []*progressStream
	url      string
	live     string
	lastT    time.Time
	lastStep int64
	rate     float64
}

var chiefMetrics = regexp.MustCompile(`^\[worker0\] .*metrics: (http://\S+/metrics)`)

func newProgress(out io.Writer, trainSteps int64) *progress {
	p := &progress{out: out, every: 30 * time.Second, trainSteps: trainSteps, scrape: telemetry.Scrape, now: time.Now}
	if f, ok := out.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty, p.every = true, time.Second
		}
	}
	return p
}

// Write passes whole lines through, clearing and redrawing the live line
// around them on a terminal.
func (p *progress) Write(b []byte) (int, error) { return p.stream(p.out).Write(b) }

// stream is a writer of one of the children's streams (their stdout or
// their stderr) to dst, sharing the live line with the others: whole
// lines go to dst with the live line cleared first and drawn again after,
// and the chief's metrics address is picked up from whichever carries it.
func (p *progress) stream(dst io.Writer) io.Writer {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.streams {
		if s.dst == dst {
			return s
		}
	}
	s := &progressStream{p: p, dst: dst}
	p.streams = append(p.streams, s)
	return s
}

type progressStream struct {
	p       *progress
	dst     io.Writer
	partial []byte // an unfinished line, held until its newline comes
}

func (s *progressStream) Write(b []byte) (int, error) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	s.partial = append(s.partial, b...)
	i := strings.LastIndexByte(string(s.partial), '\n')
	if i < 0 {
		return len(b), nil
	}
	lines := s.partial[:i+1]
	for _, line := range strings.Split(string(lines[:len(lines)-1]), "\n") {
		if m := chiefMetrics.FindStringSubmatch(line); m != nil {
			p.url = m[1]
		}
	}
	var err error
	if p.tty && p.live != "" {
		fmt.Fprint(p.out, "\r\033[K")
		_, err = s.dst.Write(lines)
		fmt.Fprint(p.out, p.live)
	} else {
		_, err = s.dst.Write(lines)
	}
	s.partial = append(s.partial[:0], s.partial[i+1:]...)
	return len(b), err
}

// run shows the progress until ctx ends, then clears the live line.
func (p *progress) run(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.mu.Lock()
			if p.tty && p.live != "" {
				fmt.Fprint(p.out, "\r\033[K")
				p.live = ""
			}
			p.mu.Unlock()
			return
		case <-t.C:
			p.tick(ctx)
		}
	}
}

// tick reads the chief's metrics and shows a progress line.
func (p *progress) tick(ctx context.Context) {
	p.mu.Lock()
	url := p.url
	p.mu.Unlock()
	if url == "" {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	f, err := p.scrape(sctx, url)
	cancel()
	if err != nil {
		return // the chief restarting or finishing: try again at the next tick
	}
	stepF, ok := f.Value("paramserv_worker_global_step")
	if !ok {
		return
	}
	loss, hasLoss := f.Value("paramserv_worker_loss")
	line := p.line(int64(stepF), loss, hasLoss)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		p.live = line
		fmt.Fprintf(p.out, "\r\033[K%s", line)
	} else {
		fmt.Fprintf(p.out, "%s\n", line)
	}
}

// line formats one progress line, updating the rate (an average over the
// ticks, weighted towards the latest).
func (p *progress) line(step int64, loss float64, hasLoss bool) string {
	now := p.now()
	if !p.lastT.IsZero() && step >= p.lastStep {
		if dt := now.Sub(p.lastT).Seconds(); dt > 0 {
			r := float64(step-p.lastStep) / dt
			if p.rate == 0 {
				p.rate = r
			} else {
				p.rate = 0.7*p.rate + 0.3*r
			}
		}
	} else if step < p.lastStep {
		p.rate = 0 // rolled back (a recovery): measure again
	}
	p.lastT, p.lastStep = now, step
	s := fmt.Sprintf("progress: global step %d", step)
	if p.trainSteps > 0 {
		s += fmt.Sprintf("/%d (%.0f%%)", p.trainSteps, 100*float64(step)/float64(p.trainSteps))
	}
	if p.rate > 0 {
		s += fmt.Sprintf(", %.1f steps/s", p.rate)
		if left := p.trainSteps - step; p.trainSteps > 0 && left > 0 {
			s += ", ETA " + (time.Duration(float64(left) / p.rate * float64(time.Second))).Round(time.Second).String()
		}
	}
	if hasLoss && !math.IsNaN(loss) {
		s += fmt.Sprintf(", loss %.4g", loss)
	}
	return s
}

// startProgress wraps out with the progress of a local job whose chief
// serves metrics (on), until stop: at chiefURL (a program's own loop,
// whose port local chose), or at the URL the chief logs.
func startProgress(ctx context.Context, out, errOut io.Writer, on bool, trainSteps int64, chiefURL string) (w, errW io.Writer, stop func()) {
	if !on {
		return out, errOut, func() {}
	}
	p := newProgress(out, trainSteps)
	p.url = chiefURL
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.run(pctx) }()
	return p.stream(out), p.stream(errOut), func() { cancel(); <-done }
}
