package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/paramserv/paramserv/internal/curves"
)

// maxPlotPixels bounds plot's width and height: 16384 x 16384 RGBA is
// 1 GiB of image in memory.
const maxPlotPixels = 16384

// Plot is `paramserv plot`: draw runs' curves into a PNG.
func Plot(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "the PNG file to write (required)")
	tags := fs.String("tags", "loss", "comma-separated tags to draw, a panel each (loss, global_step/sec, examples/sec, dropped_pushes, eval/NAME)")
	width := fs.Int("width", 900, "image width in pixels")
	height := fs.Int("height", 0, "image height in pixels (default: 360 per tag)")
	smoothing := fs.Float64("smoothing", 0, "smooth each line as TensorBoard's slider does (an exponential moving average of this weight, 0 to below 1; 0: none)")
	help := func(w io.Writer) {
		fmt.Fprint(w, `Usage: paramserv plot SUMMARY_DIR_OR_RESULT... -o out.png [--tags=loss,...]

Draws the scalar summaries of one or more runs over the global step, one
line per run (named by its directory or file) and one panel per tag: a
run is a --summary_dir (or --checkpoint_dir) holding the chief's event
files, or a --result_file, whose final metrics are single points
(eval/NAME).
`)
		printFlags(w, fs, false, nil)
	}
	// Flags may come before or after the inputs.
	var inputs []string
	for {
		if code, done := parseArgs(fs, args, stdout, stderr, help); done {
			return code
		}
		if fs.NArg() == 0 {
			break
		}
		inputs = append(inputs, fs.Arg(0))
		args = fs.Args()[1:]
	}
	var tagList []string
	for _, t := range strings.Split(*tags, ",") {
		if t = strings.TrimSpace(t); t != "" {
			tagList = append(tagList, t)
		}
	}
	switch {
	case len(inputs) == 0:
		fmt.Fprintf(stderr, "paramserv plot: name at least one run: a summary directory or a result file\nrun 'paramserv plot --help' for its flags\n")
		return 2
	case *out == "":
		fmt.Fprintf(stderr, "paramserv plot: -o is required: the PNG file to write\nrun 'paramserv plot --help' for its flags\n")
		return 2
	case len(tagList) == 0:
		fmt.Fprintf(stderr, "paramserv plot: --tags=%q: want at least one tag\n", *tags)
		return 2
	case !(*smoothing >= 0 && *smoothing < 1):
		fmt.Fprintf(stderr, "paramserv plot: --smoothing=%v: want 0 to below 1\n", *smoothing)
		return 2
	case *width < 100 || *height < 0 || (*height > 0 && *height < 100):
		fmt.Fprintf(stderr, "paramserv plot: --width=%d --height=%d: want at least 100 pixels\n", *width, *height)
		return 2
	}
	if *height == 0 {
		*height = 360 * len(tagList)
	}
	if *width > maxPlotPixels || *height > maxPlotPixels {
		fmt.Fprintf(stderr, "paramserv plot: --width=%d --height=%d: want at most %d pixels each (%d tags take 360 each by default)\n", *width, *height, maxPlotPixels, len(tagList))
		return 2
	}
	if err := checkOutFile("o", *out); err != nil {
		fmt.Fprintf(stderr, "paramserv plot: %v\n", err)
		return 2
	}
	var runs []curves.Run
	names := map[string]int{}
	for _, in := range inputs {
		r, err := curves.Load(in)
		if err != nil {
			fmt.Fprintf(stderr, "paramserv plot: %v\n", err)
			return 2
		}
		names[r.Name]++
		runs = append(runs, r)
	}
	for i := range runs {
		if names[runs[i].Name] > 1 {
			runs[i].Name = inputs[i] // two runs of one name: tell them apart by path
		}
	}
	// Into a temporary file beside it, then renamed over it: a failure
	// leaves an earlier file of that name as it was.
	f, err := os.CreateTemp(filepath.Dir(*out), ".plot-*")
	if err != nil {
		fmt.Fprintf(stderr, "paramserv plot: -o=%s: %v\n", *out, err)
		return 1
	}
	defer addTemp(f.Name())()
	defer os.Remove(f.Name())
	fig, err := curves.Draw(f, runs, tagList, *width, *height, *smoothing)
	if err != nil {
		f.Close()
		fmt.Fprintf(stderr, "paramserv plot: %v\n", err)
		return 2 // a tag no run has, data that cannot be drawn
	}
	err = f.Close()
	if err == nil {
		err = os.Rename(f.Name(), *out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "paramserv plot: -o=%s: %v\n", *out, err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s: %d lines, %d points, %d runs, tags %s\n", *out, fig.Lines, fig.Points, len(runs), strings.Join(tagList, ", "))
	return 0
}
