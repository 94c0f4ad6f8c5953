package sparse

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.txt with the output the code gives now")

// TestScenarios runs the scripts in testdata/. Each command line is
// followed by its output, indented two spaces; the test reruns the commands
// and compares the whole file, so a change in behaviour shows as a diff
// (go test -run Scenarios -update rewrites the files). Commands:
//
//	new dim=D [min=N] [evict=S] [maxrows=N] [width=W]   a table with a test SGD rule (p -= 0.5*g)
//	pull K...                                            prints K=value for each key
//	push step=S K... [grad=G]                            gradient G (default 1) for every key
//	evict step=S                                         prints the count evicted
//	stats                                                prints the counters
//	rows                                                 prints key@last-touch, sorted
//	allocated                                            prints the row slots ever allocated and those free
func TestScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no scenarios in testdata/")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got := runScript(t, file, string(raw))
			if got == string(raw) {
				return
			}
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			t.Errorf("%s: output differs (rerun with -update to accept):\n%s", file, lineDiff(string(raw), got))
		})
	}
}

func runScript(t *testing.T, file, script string) string {
	var b strings.Builder
	var tb *Table
	for n, line := range strings.Split(strings.TrimRight(script, "\n"), "\n") {
		if strings.HasPrefix(line, "  ") {
			continue // old output; regenerated below
		}
		b.WriteString(line + "\n")
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		where := fmt.Sprintf("%s:%d", file, n+1)
		args := map[string]string{}
		var keys []uint64
		for _, f := range fields[1:] {
			if k, v, ok := strings.Cut(f, "="); ok {
				args[k] = v
				continue
			}
			k, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatalf("%s: bad key %q", where, f)
			}
			keys = append(keys, k)
		}
		num := func(name string, def int64) int64 {
			v, ok := args[name]
			if !ok {
				return def
			}
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: %s=%q is not a number", where, name, v)
			}
			return x
		}
		if fields[0] != "new" && tb == nil {
			t.Fatalf("%s: %s before new", where, fields[0])
		}
		var out []string
		switch fields[0] {
		case "new":
			var err error
			tb, err = New(Config{
				Dim: int(num("dim", 1)), Rule: scenarioSGD{},
				MinCount: int(num("min", 0)), EvictAfterSteps: num("evict", 0),
				MaxRows: int(num("maxrows", 0)), SketchWidth: int(num("width", 1<<12)),
			})
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		case "pull":
			vals := make([]float32, len(keys)*tb.Dim())
			if err := tb.Pull(keys, vals); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var s []string
			for i, k := range keys {
				s = append(s, fmt.Sprintf("%d=%v", k, vals[i*tb.Dim():(i+1)*tb.Dim()]))
			}
			out = append(out, strings.Join(s, " "))
		case "push":
			g, err := strconv.ParseFloat(args["grad"], 32)
			if args["grad"] == "" {
				g, err = 1, nil
			}
			if err != nil {
				t.Fatalf("%s: grad=%q", where, args["grad"])
			}
			grads := make([]float32, len(keys)*tb.Dim())
			for i := range grads {
				grads[i] = float32(g)
			}
			if err := tb.Push(keys, grads, num("step", 0)); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		case "evict":
			out = append(out, fmt.Sprintf("evicted %d", tb.Evict(num("step", 0))))
		case "stats":
			s := tb.Stats()
			out = append(out, fmt.Sprintf("rows=%d admitted=%d rejected_pulls=%d rejected_pushes=%d capacity_rejects=%d evicted=%d",
				s.Rows, s.Admitted, s.RejectedPulls, s.RejectedPushes, s.CapacityRejects, s.Evicted))
		case "rows":
			var s []string
			for r := range tb.All() {
				s = append(s, fmt.Sprintf("%d@%d", r.Key, r.LastTouch))
			}
			if len(s) == 0 {
				s = []string{"(none)"}
			}
			out = append(out, strings.Join(s, " "))
		case "allocated":
			out = append(out, fmt.Sprintf("row slots allocated %d, free %d", tb.highWater, tb.highWater-tb.live))
		default:
			t.Fatalf("%s: unknown command %q", where, fields[0])
		}
		for _, o := range out {
			b.WriteString("  " + strings.TrimRight(o, " ") + "\n")
		}
	}
	return b.String()
}

// lineDiff shows the lines of want and got side by side where they differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := range max(len(w), len(g)) {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			fmt.Fprintf(&b, "line %d\n  file: %q\n  code: %q\n", i+1, a, c)
		}
	}
	return b.String()
}

// scenarioSGD is p -= 0.5*g, so values in the scripts stay readable.
type scenarioSGD struct{}

func (scenarioSGD) Name() string          { return "sgd" }
func (scenarioSGD) StateSlots() int       { return 0 }
func (scenarioSGD) InitState([][]float32) {}
func (scenarioSGD) Update(p, g []float32, _ [][]float32, _ int64) {
	for i := range p {
		p[i] -= 0.5 * g[i]
	}
}
