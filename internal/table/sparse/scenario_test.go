package sparse

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/scenario"
)

// TestScenarios runs the scripts in testdata/ through the project's one
// scenario driver (package scenario): each command line is followed by its
// output, indented two spaces, and go test -run Scenarios -update rewrites
// the files. Commands:
//
//	new dim=D [min=N] [evict=S] [maxrows=N] [width=W]   a table with a test SGD rule (p -= 0.5*g)
//	pull K...                                            prints K=value for each key
//	push step=S K... [grad=G]                            gradient G (default 1) for every key
//	evict step=S                                         prints the count evicted
//	stats                                                prints the counters
//	rows                                                 prints key@last-touch, sorted
//	allocated                                            prints the row slots ever allocated and those free
func TestScenarios(t *testing.T) {
	scenario.Run(t, func() scenario.Runner {
		var tb *Table
		return func(t *testing.T, c scenario.Cmd) (string, error) {
			var keys []uint64
			for _, f := range c.Args {
				k, err := strconv.ParseUint(f, 10, 64)
				if err != nil {
					t.Fatalf("%s: bad key %q", c.Where, f)
				}
				keys = append(keys, k)
			}
			if c.Name != "new" && tb == nil {
				t.Fatalf("%s: %s before new", c.Where, c.Name)
			}
			switch c.Name {
			case "new":
				var err error
				tb, err = New(Config{
					Dim: int(c.Int(t, "dim", 1)), Rule: scenarioSGD{},
					MinCount: int(c.Int(t, "min", 0)), EvictAfterSteps: c.Int(t, "evict", 0),
					MaxRows: int(c.Int(t, "maxrows", 0)), SketchWidth: int(c.Int(t, "width", 1<<12)),
				})
				if err != nil {
					t.Fatalf("%s: %v", c.Where, err)
				}
				return "", nil
			case "pull":
				vals := make([]float32, len(keys)*tb.Dim())
				if err := tb.Pull(keys, vals); err != nil {
					t.Fatalf("%s: %v", c.Where, err)
				}
				var s []string
				for i, k := range keys {
					s = append(s, fmt.Sprintf("%d=%v", k, vals[i*tb.Dim():(i+1)*tb.Dim()]))
				}
				return strings.Join(s, " "), nil
			case "push":
				g, err := strconv.ParseFloat(c.KV["grad"], 32)
				if c.KV["grad"] == "" {
					g, err = 1, nil
				}
				if err != nil {
					t.Fatalf("%s: grad=%q", c.Where, c.KV["grad"])
				}
				grads := make([]float32, len(keys)*tb.Dim())
				for i := range grads {
					grads[i] = float32(g)
				}
				if err := tb.Push(keys, grads, c.Int(t, "step", 0)); err != nil {
					t.Fatalf("%s: %v", c.Where, err)
				}
				return "", nil
			case "evict":
				return fmt.Sprintf("evicted %d", tb.Evict(c.Int(t, "step", 0))), nil
			case "stats":
				s := tb.Stats()
				return fmt.Sprintf("rows=%d admitted=%d rejected_pulls=%d rejected_pushes=%d capacity_rejects=%d evicted=%d",
					s.Rows, s.Admitted, s.RejectedPulls, s.RejectedPushes, s.CapacityRejects, s.Evicted), nil
			case "rows":
				var s []string
				for r := range tb.All() {
					s = append(s, fmt.Sprintf("%d@%d", r.Key, r.LastTouch))
				}
				if len(s) == 0 {
					s = []string{"(none)"}
				}
				return strings.Join(s, " "), nil
			case "allocated":
				return fmt.Sprintf("row slots allocated %d, free %d", tb.highWater, tb.highWater-tb.live), nil
			}
			t.Fatalf("%s: unknown command %q", c.Where, c.Name)
			return "", nil
		}
	})
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
