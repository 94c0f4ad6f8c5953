package cli

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/tfevents"
)

func TestPlotCommand(t *testing.T) {
	tmp := t.TempDir()
	for _, run := range []string{"a", "b"} {
		w, err := tfevents.Create(filepath.Join(tmp, run), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for s := int64(1); s <= 5; s++ {
			w.Scalars(s*100, time.Now(), map[string]float64{"loss": 1 / float64(s), "examples/sec": 1000})
		}
		w.Close()
	}
	out := filepath.Join(tmp, "out.png")
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"plot", filepath.Join(tmp, "a"), filepath.Join(tmp, "b"), "-o", out, "--tags=loss,examples/sec", "--smoothing=0.6"}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "4 lines") {
		t.Fatalf("plot exited %d: %s%s; want 4 lines", code, stdout.String(), stderr.String())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if cfg, err := png.DecodeConfig(f); err != nil || cfg.Width != 900 || cfg.Height != 720 {
		t.Errorf("out.png: %+v, %v; want a 900x720 PNG", cfg, err)
	}
	for _, args := range [][]string{
		{"plot", filepath.Join(tmp, "a")},                               // no -o
		{"plot", filepath.Join(tmp, "nope"), "-o", out},                 // no such run
		{"plot", tmp, "-o", out},                                        // no event files
		{"plot", filepath.Join(tmp, "a"), "-o", out, "--tags=accuracy"}, // no such tag
		{"plot", filepath.Join(tmp, "a"), "-o", out, "--smoothing=1"},   // out of range
	} {
		stderr.Reset()
		if code := Main(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%v exited %d, want 2: %s", args, code, stderr.String())
		}
	}
}
