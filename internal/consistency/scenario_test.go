package consistency

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/paramserv/paramserv/internal/scenario"
)

// TestScenarios runs every testdata/*.txt file through the project's one
// scenario driver (package scenario); each command is followed by its
// outcome, indented two spaces, and -update rewrites them from what the
// tracker does, so a change of behaviour shows up as a diff. Commands:
//
//	new sync r=2 n=3 [step=5]      a fresh tracker (or: new async n=2 [staleness=2])
//	push W S                       worker W pushes a gradient computed at step S: VERDICT step=N
//	ready S                        can a pull that needs step S be answered? true|false
//	waiting                        have/want missing=[...]
//	stats                          applied=A stale=S dup=D
func TestScenarios(t *testing.T) {
	scenario.Run(t, func() scenario.Runner {
		var tr *Tracker
		return func(t *testing.T, c scenario.Cmd) (string, error) {
			if c.Name != "new" && tr == nil {
				t.Fatalf("%s: %s before new", c.Where, c.Name)
			}
			switch c.Name {
			case "new":
				if len(c.Args) != 1 {
					t.Fatalf("%s: new sync|async", c.Where)
				}
				cfg := Config{
					Sync:                c.Args[0] == "sync",
					ReplicasToAggregate: int(c.Int(t, "r", 0)),
					NumWorkers:          int(c.Int(t, "n", 0)),
					MaxStaleness:        c.Int(t, "staleness", 0),
				}
				var err error
				tr, err = New(cfg, c.Int(t, "step", 0))
				return "", err
			case "push":
				v, err := tr.Push(int(c.Arg(t, 0)), c.Arg(t, 1))
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("%s step=%d", v, tr.Step()), nil
			case "ready":
				return strconv.FormatBool(tr.Ready(c.Arg(t, 0))), nil
			case "waiting":
				have, want, missing := tr.Waiting()
				return fmt.Sprintf("%d/%d missing=%v", have, want, missing), nil
			case "stats":
				s := tr.Stats()
				return fmt.Sprintf("applied=%d stale=%d dup=%d", s.Applied, s.StaleDropped, s.DuplicateDrops), nil
			}
			t.Fatalf("%s: unknown command %q", c.Where, c.Name)
			return "", nil
		}
	})
}
