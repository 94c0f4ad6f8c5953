package telemetry

import (
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/paramserv/paramserv/internal/wire/pb"
)

// FormatStatus is one ps's part of paramserv status.
func FormatStatus(i int, host string, st *pb.StatusResponse) string {
	var b strings.Builder
	if !st.Initialized {
		fmt.Fprintf(&b, "ps %d at %s: not initialised (waiting for the chief or a restore)\n", i, host)
	} else {
		restored := ""
		if st.RestoredStep >= 0 {
			restored = fmt.Sprintf(", restored from the checkpoint of step %d", st.RestoredStep)
		}
		fmt.Fprintf(&b, "ps %d at %s: global step %d, %s, incarnation %x%s\n", i, host, st.GlobalStep, st.Mode, st.Incarnation, restored)
		fmt.Fprintf(&b, "  pushes: %d applied, %d dropped as stale or duplicate, %d rejected\n", st.AppliedPushes, st.StaleDropped, st.RejectedPushes)
		if st.LearningRate > 0 {
			fmt.Fprintf(&b, "  learning rate: %v (the job's rule, at the next update)\n", st.LearningRate)
		}
	}
	if len(st.Vars) > 0 {
		var parts []string
		var total int64
		for _, v := range st.Vars {
			parts = append(parts, fmt.Sprintf("%s (%d values)", v.Name, v.Elements))
			total += 4 * v.Elements
		}
		fmt.Fprintf(&b, "  variables: %d, %s: %s\n", len(st.Vars), humanBytes(total), strings.Join(parts, ", "))
	}
	for _, t := range st.Tables {
		disk := ""
		if t.DiskRows > 0 || t.DiskLookups > 0 {
			rate := "-"
			if t.DiskLookups > 0 {
				rate = fmt.Sprintf("%.3f", float64(t.DiskHits)/float64(t.DiskLookups))
			}
			disk = fmt.Sprintf(" (%d on disk; %d looked for there, hit rate %s)", t.DiskRows, t.DiskLookups, rate)
		}
		fmt.Fprintf(&b, "  table %s: %d rows%s, %s, %d admitted, %d evicted\n", t.Name, t.Rows, disk, humanBytes(t.Bytes), t.Admitted, t.Evicted)
	}
	if len(st.Workers) > 0 {
		var parts []string
		for _, w := range st.Workers {
			s := fmt.Sprintf("%d: never heard from", w.Worker)
			if w.LastSeenMsAgo >= 0 {
				s = fmt.Sprintf("%d: last heard %s ago", w.Worker, (time.Duration(w.LastSeenMsAgo) * time.Millisecond).Round(100*time.Millisecond))
			}
			if w.Done {
				s += " (done)"
			}
			parts = append(parts, s)
		}
		fmt.Fprintf(&b, "  workers (%d of %d done): %s\n", st.WorkersDone, st.NumWorkers, strings.Join(parts, "; "))
	}
	if st.CheckpointDir != "" {
		fmt.Fprintf(&b, "  checkpoint dir: %s\n", st.CheckpointDir)
	}
	return b.String()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Page is the status page served at / beside /metrics: a task's state as
// text, refreshed every few seconds, and its loss curve if it has one.
type Page struct {
	Title string
	// Text returns the state to show.
	Text func() string
	// Curve returns the points of the loss curve (nil: none).
	Curve func() []CurvePoint
}

// CurvePoint is one point of a page's curve.
type CurvePoint struct {
	Step int64
	Loss float64
}

var pageTmpl = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>{{.Title}}</title>
<style>body{font-family:sans-serif;margin:2em}pre{background:#f4f4f4;padding:1em}svg{background:#fff;border:1px solid #ccc}</style>
</head><body>
<h1>{{.Title}}</h1>
<pre id="status">{{.Text}}</pre>
{{if .Path}}<h2>loss over the global step</h2>
<svg id="loss" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}">
<polyline fill="none" stroke="#d62728" stroke-width="2" points="{{.Path}}"/>
<text x="4" y="14" font-size="12">{{.YMax}}</text><text x="4" y="{{.H}}" dy="-4" font-size="12">{{.YMin}}</text>
<text x="{{.W}}" y="{{.H}}" dx="-4" dy="-4" font-size="12" text-anchor="end">step {{.XMax}}</text>
</svg>{{end}}
<p><a href="/metrics">/metrics</a></p>
</body></html>
`))

// ServeHTTP implements http.Handler.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	data := struct {
		Title, Text, Path, YMin, YMax string
		W, H                          int
		XMax                          int64
	}{Title: p.Title, W: 640, H: 240}
	if p.Text != nil {
		data.Text = p.Text()
	}
	if p.Curve != nil {
		pts := p.Curve()
		var finite []CurvePoint
		for _, pt := range pts {
			if !math.IsNaN(pt.Loss) && !math.IsInf(pt.Loss, 0) {
				finite = append(finite, pt)
			}
		}
		if len(finite) >= 2 {
			lo, hi := finite[0].Loss, finite[0].Loss
			x0, x1 := finite[0].Step, finite[len(finite)-1].Step
			for _, pt := range finite {
				lo, hi = min(lo, pt.Loss), max(hi, pt.Loss)
			}
			if hi == lo {
				hi = lo + 1
			}
			var b strings.Builder
			for _, pt := range finite {
				x := float64(data.W) * float64(pt.Step-x0) / float64(max(x1-x0, 1))
				y := float64(data.H) - 20 - (float64(data.H)-40)*(pt.Loss-lo)/(hi-lo)
				fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
			}
			data.Path = strings.TrimSpace(b.String())
			data.YMin, data.YMax, data.XMax = fmt.Sprintf("%.4g", lo), fmt.Sprintf("%.4g", hi), x1
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = pageTmpl.Execute(w, data)
}

// curve keeps the latest points of a loss curve, thinned to at most
// curveMax by keeping every other point when full.
type curve struct {
	mu    sync.Mutex
	every int64 // keep a point every this many steps
	n     int64
	pts   []CurvePoint
}

const curveMax = 512

func (c *curve) add(step int64, loss float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.every == 0 {
		c.every = 1
	}
	c.n++
	if c.n%c.every != 0 {
		return
	}
	if len(c.pts) == curveMax {
		j := 0
		for i := 0; i < len(c.pts); i += 2 {
			c.pts[j] = c.pts[i]
			j++
		}
		c.pts = c.pts[:j]
		c.every *= 2
	}
	c.pts = append(c.pts, CurvePoint{Step: step, Loss: loss})
}

func (c *curve) points() []CurvePoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]CurvePoint(nil), c.pts...)
}

// workerText is a worker's page text.
func (w *Worker) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last.LocalStep == 0 {
		return fmt.Sprintf("worker: no step yet (started %s ago)", time.Since(w.started).Round(time.Second))
	}
	s := w.last
	loss := fmt.Sprintf("loss %.4g", s.Loss)
	if math.IsNaN(s.Loss) {
		loss = "no loss reported"
	}
	return fmt.Sprintf("worker %d: global step %d, %d local steps, %s\nlast step: compute %s, push+pull %s\n%d of its pushes dropped as stale",
		s.Worker, s.GlobalStep, s.LocalStep, loss, s.Compute.Round(time.Microsecond), s.Exchange.Round(time.Microsecond), w.droppedN)
}

// Page returns the worker's status page.
func (w *Worker) Page() *Page {
	return &Page{Title: "paramserv worker", Text: w.text, Curve: w.curve.points}
}

// Page returns the ps's status page: its status as paramserv status
// prints it.
func (p *PS) Page(task int, addr string) *Page {
	return &Page{Title: fmt.Sprintf("paramserv ps %d", task), Text: func() string {
		st := p.State()
		if st.Status == nil {
			return "not serving yet"
		}
		return FormatStatus(task, addr, st.Status)
	}}
}
