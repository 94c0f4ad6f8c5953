// Package curves draws training curves: the scalar series of one or more
// runs (a summary directory's event files, or a result file's final
// metrics) over the global step, one panel per tag and one line per run,
// as a PNG (gonum/plot). It is `paramserv plot`.
package curves

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/paramserv/paramserv/internal/tfevents"
)

// Run is one run's scalar series, by tag.
type Run struct {
	Name   string
	Series map[string][]tfevents.Point
}

// MaxResultFile bounds the size of a result file Load reads (they are a
// few KiB): a path to /dev/zero or a huge file is refused, not read into
// memory.
const MaxResultFile = 64 << 20

// Load reads a run: a directory of event files (its scalars), or a result
// file (--result_file: its metrics as single points "eval/NAME" at its
// global step, as the chief's summaries name them).
func Load(path string) (Run, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Run{}, err
	}
	name := filepath.Base(filepath.Clean(path))
	if fi.IsDir() {
		s, err := tfevents.ReadScalars(path)
		if err != nil {
			return Run{}, err
		}
		return Run{Name: name, Series: s}, nil
	}
	if !fi.Mode().IsRegular() {
		kind := "special file"
		switch m := fi.Mode(); {
		case m&os.ModeDevice != 0:
			kind = "device"
		case m&os.ModeNamedPipe != 0:
			kind = "named pipe"
		case m&os.ModeSocket != 0:
			kind = "socket"
		}
		return Run{}, fmt.Errorf("%s: not a summary directory nor a result file (a %s, not a regular file)", path, kind)
	}
	if fi.Size() > MaxResultFile {
		return Run{}, fmt.Errorf("%s: %d bytes, more than a result file's %d: not a summary directory nor a result file", path, fi.Size(), MaxResultFile)
	}
	f, err := os.Open(path)
	if err != nil {
		return Run{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxResultFile+1))
	if err != nil {
		return Run{}, err
	}
	var r struct {
		GlobalStep *int64             `json:"global_step"`
		Metrics    map[string]float64 `json:"metrics"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.GlobalStep == nil {
		return Run{}, fmt.Errorf("%s: not a summary directory nor a result file (JSON with global_step and metrics)", path)
	}
	run := Run{Name: strings.TrimSuffix(name, filepath.Ext(name)), Series: map[string][]tfevents.Point{}}
	for k, v := range r.Metrics {
		run.Series["eval/"+k] = []tfevents.Point{{Step: *r.GlobalStep, Value: v}}
	}
	return run, nil
}

// Figure is what Draw drew.
type Figure struct {
	Lines  int // series of two points or more, drawn as lines
	Points int // series of one point, drawn as a marker
	// Colors are the colors of the runs, in order.
	Colors []color.Color
}

// Smooth returns pts smoothed as TensorBoard's slider does: an
// exponential moving average with weight w (0: none, below 1), debiased
// so that the first points are not pulled towards 0.
func Smooth(pts []tfevents.Point, w float64) []tfevents.Point {
	if w <= 0 {
		return pts
	}
	out := make([]tfevents.Point, len(pts))
	var last float64
	for i, p := range pts {
		last = last*w + (1-w)*p.Value
		out[i] = tfevents.Point{Step: p.Step, Value: last / (1 - math.Pow(w, float64(i+1)))}
	}
	return out
}

// Draw writes a PNG of width x height pixels to w: a panel per tag (in
// order), in each a line per run that has the tag, in the run's color,
// named in the legend, smoothed by smoothing (see Smooth). A tag no run
// has is an error naming the tags there are.
func Draw(w io.Writer, runs []Run, tags []string, width, height int, smoothing float64) (Figure, error) {
	var fig Figure
	for i := range runs {
		fig.Colors = append(fig.Colors, plotutil.Color(i))
	}
	var panels [][]*plot.Plot
	for _, tag := range tags {
		p := plot.New()
		p.Title.Text = tag
		p.X.Label.Text = "global step"
		p.X.Tick.Marker, p.Y.Tick.Marker = shortTicks{}, shortTicks{}
		found := false
		var drawn []plotter.XYs
		for i, r := range runs {
			pts := Smooth(r.Series[tag], smoothing)
			if len(pts) == 0 {
				continue
			}
			found = true
			xy := make(plotter.XYs, 0, len(pts))
			for _, pt := range pts {
				if !math.IsNaN(pt.Value) && !math.IsInf(pt.Value, 0) {
					xy = append(xy, plotter.XY{X: float64(pt.Step), Y: pt.Value})
				}
			}
			if len(xy) == 0 {
				continue
			}
			drawn = append(drawn, xy)
			if len(xy) == 1 {
				s, err := plotter.NewScatter(xy)
				if err != nil {
					return fig, err
				}
				s.GlyphStyle.Color = fig.Colors[i]
				s.GlyphStyle.Radius = vg.Points(4)
				s.GlyphStyle.Shape = draw.CircleGlyph{}
				p.Add(s)
				p.Legend.Add(r.Name, s)
				fig.Points++
				continue
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return fig, err
			}
			l.LineStyle.Color = fig.Colors[i]
			l.LineStyle.Width = vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(r.Name, l)
			fig.Lines++
		}
		if !found {
			return fig, fmt.Errorf("no run has the tag %q (tags: %s)", tag, strings.Join(allTags(runs), ", "))
		}
		p.Legend.Top, p.Legend.Left = legendCorner(drawn)
		p.Add(plotter.NewGrid())
		panels = append(panels, []*plot.Plot{p})
	}
	if len(panels) == 0 {
		return fig, fmt.Errorf("no tags to draw")
	}
	c := vgimg.NewWith(vgimg.UseWH(vg.Length(width)*vg.Inch/96, vg.Length(height)*vg.Inch/96), vgimg.UseDPI(96))
	dc := draw.New(c)
	// A white background: a PNG viewer's own may be dark.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadX: vg.Points(6), PadY: vg.Points(12)}
	canvases := plot.Align(panels, tiles, dc)
	for i := range panels {
		panels[i][0].Draw(canvases[i][0])
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(w); err != nil {
		return fig, err
	}
	return fig, nil
}

// legendCorner picks the corner of a panel the legend covers least data
// in: of the four, the one whose quarter-by-third of the panel holds the
// fewest points (the top right first, then top left, bottom right, bottom
// left, on a tie). A legend always on top covered the validation curves,
// which start high on the left and end high on the right for metrics that
// grow.
func legendCorner(lines []plotter.XYs) (top, left bool) {
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, l := range lines {
		for _, p := range l {
			xmin, xmax = math.Min(xmin, p.X), math.Max(xmax, p.X)
			ymin, ymax = math.Min(ymin, p.Y), math.Max(ymax, p.Y)
		}
	}
	if math.IsInf(xmin, 1) {
		return true, false
	}
	// The corners' boxes as fractions of the ranges: the legend is about
	// a third of a panel wide and a quarter high.
	frac := func(v, lo, hi float64) float64 {
		if hi == lo {
			return 0.5
		}
		return (v - lo) / (hi - lo)
	}
	corners := []struct{ top, left bool }{{true, false}, {true, true}, {false, false}, {false, true}}
	best, bestN := 0, -1
	for i, c := range corners {
		n := 0
		for _, l := range lines {
			for _, p := range l {
				fx, fy := frac(p.X, xmin, xmax), frac(p.Y, ymin, ymax)
				inX := (c.left && fx <= 0.35) || (!c.left && fx >= 0.65)
				inY := (c.top && fy >= 0.75) || (!c.top && fy <= 0.25)
				if inX && inY {
					n++
				}
			}
		}
		if bestN < 0 || n < bestN {
			best, bestN = i, n
		}
	}
	return corners[best].top, corners[best].left
}

// shortTicks are gonum's default ticks labelled for a person: 52500 reads
// 52.5k and 1500000 1.5M, where the default printed 52500.00.
type shortTicks struct{}

// Ticks returns the default ticks of [lo, hi] with short labels.
func (shortTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = shortNumber(t.Value)
		}
	}
	return ticks
}

// shortNumber formats v with at most four significant digits and an SI
// suffix (k, M, G, T) from a thousand up.
func shortNumber(v float64) string {
	a := math.Abs(v)
	for _, u := range []struct {
		scale  float64
		suffix string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if a >= u.scale {
			return strconv.FormatFloat(v/u.scale, 'g', 4, 64) + u.suffix
		}
	}
	if a != 0 && a < 1e-3 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// allTags lists the tags of runs, sorted.
func allTags(runs []Run) []string {
	var out []string
	for _, r := range runs {
		for t := range r.Series {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	slices.Sort(out)
	return out
}
