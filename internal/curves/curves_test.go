package curves

import (
	"bytes"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/paramserv/paramserv/internal/tfevents"
)

// writeRun writes an event file of loss 1/step at steps 10, 20, ... n.
func writeRun(t *testing.T, dir string, n int64, scale float64) {
	t.Helper()
	w, err := tfevents.Create(dir, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	for s := int64(10); s <= n; s += 10 {
		w.Scalars(s, time.Unix(1700000000, 0), map[string]float64{"loss": scale / float64(s)})
	}
	w.Close()
}

// pixels counts the image's pixels of exactly color c.
func pixels(t *testing.T, b []byte, c color.Color) (n, width, height int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	r0, g0, b0, _ := c.RGBA()
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if r>>8 == r0>>8 && g>>8 == g0>>8 && b>>8 == b0>>8 {
				n++
			}
		}
	}
	return n, bounds.Dx(), bounds.Dy()
}

func TestDrawRuns(t *testing.T) {
	tmp := t.TempDir()
	a, b := filepath.Join(tmp, "async"), filepath.Join(tmp, "sync")
	writeRun(t, a, 1000, 1)
	writeRun(t, b, 500, 2)
	res := filepath.Join(tmp, "r.json")
	os.WriteFile(res, []byte(`{"global_step": 1000, "metrics": {"loss": 0.1, "test_accuracy": 0.97}}`), 0o644)
	var runs []Run
	for _, p := range []string{a, b, res} {
		r, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if runs[2].Name != "r" || len(runs[2].Series["eval/test_accuracy"]) != 1 {
		t.Errorf("result file read as %+v", runs[2])
	}
	var out bytes.Buffer
	fig, err := Draw(&out, runs, []string{"loss", "eval/test_accuracy"}, 600, 500, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Two runs have a loss curve; the result file has one point.
	if fig.Lines != 2 || fig.Points != 1 {
		t.Errorf("drew %d lines and %d points, want 2 and 1", fig.Lines, fig.Points)
	}
	for i, c := range fig.Colors {
		n, w, h := pixels(t, out.Bytes(), c)
		if w != 600 || h != 500 {
			t.Fatalf("image %dx%d, want 600x500", w, h)
		}
		// A line over the width of the panel, or a marker and its legend.
		if least := []int{300, 300, 20}[i]; n < least {
			t.Errorf("run %d's color %v: %d pixels, want at least %d", i, c, n, least)
		}
	}
	if _, err := Draw(&bytes.Buffer{}, runs, []string{"accuracy"}, 600, 500, 0); err == nil || !strings.Contains(err.Error(), "eval/test_accuracy, loss") {
		t.Errorf("unknown tag: %v, want an error listing the tags", err)
	}
}

func TestSmooth(t *testing.T) {
	pts := []tfevents.Point{{Step: 1, Value: 1}, {Step: 2, Value: 3}, {Step: 3, Value: 3}}
	got := Smooth(pts, 0.5)
	// Debiased EMA: 1; (0.5*0.5+0.5*3)/(1-0.25) = 1.75/0.75; ...
	want := []float64{1, 1.75 / 0.75, (0.875 + 1.5) / 0.875}
	for i := range want {
		if math.Abs(got[i].Value-want[i]) > 1e-12 || got[i].Step != pts[i].Step {
			t.Errorf("point %d = %+v, want %g", i, got[i], want[i])
		}
	}
	if Smooth(pts, 0)[1].Value != 3 {
		t.Errorf("weight 0 changed the values")
	}
}

// Load refuses what is neither a directory nor a regular file of a result
// file's size before reading it: /dev/zero was read until the kernel
// killed the process, a named pipe blocked for ever.
func TestLoadRefusesSpecialAndHugeFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.json")
	if err := os.WriteFile(huge, nil, 0o644); err != nil || os.Truncate(huge, MaxResultFile+1) != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/dev/zero": "(a device, not a regular file)",
		fifo:        "(a named pipe, not a regular file)",
		huge:        "more than a result file's",
	} {
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s): %v, want %q", path, err, want)
		}
	}
}

func TestShortTickLabels(t *testing.T) {
	for v, want := range map[float64]string{
		52500: "52.5k", 1500000: "1.5M", 100000: "100k", 2e9: "2G", 0.25: "0.25", 0: "0", 1: "1",
		-12000: "-12k", 0.0005: "0.0005", 999: "999",
	} {
		if got := shortNumber(v); got != want {
			t.Errorf("shortNumber(%v) = %q, want %q", v, got, want)
		}
	}
	for _, tk := range (shortTicks{}).Ticks(50000, 55000) {
		if strings.Contains(tk.Label, ".00") || strings.Contains(tk.Label, "000") {
			t.Errorf("tick %v labelled %q, want a short label such as 52.5k", tk.Value, tk.Label)
		}
	}
}

func TestLegendAvoidsTheCurves(t *testing.T) {
	line := func(f func(x float64) float64) plotter.XYs {
		var xy plotter.XYs
		for x := 0.0; x <= 100; x++ {
			xy = append(xy, plotter.XY{X: x, Y: f(x)})
		}
		return xy
	}
	for _, c := range []struct {
		name      string
		lines     []plotter.XYs
		top, left bool
	}{
		// A validation accuracy: rises quickly, then runs along the top.
		{"rising", []plotter.XYs{line(func(x float64) float64 { return 1 - math.Exp(-x/5) })}, false, false},
		// A loss: falls quickly, then runs along the bottom.
		{"falling", []plotter.XYs{line(func(x float64) float64 { return math.Exp(-x / 5) })}, true, false},
		// A straight fall from the top left to the bottom right, and a
		// second run along the top right: only the bottom left is free.
		{"both", []plotter.XYs{
			line(func(x float64) float64 { return 1 - x/100 }),
			line(func(x float64) float64 { return 0.5 + x/200 }),
		}, false, true},
	} {
		top, left := legendCorner(c.lines)
		if top != c.top || left != c.left {
			t.Errorf("%s: legend at top=%v left=%v, want top=%v left=%v", c.name, top, left, c.top, c.left)
		}
	}
}
