package consistency

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the expected outcomes in testdata/*.txt")

// TestScenarios runs every testdata/*.txt file. Each line is a command,
// optionally followed by "=>" and the expected outcome:
//
//	new sync r=2 n=3 [step=5]      a fresh tracker (or: new async n=2 [staleness=2])
//	push W S => VERDICT step=N     worker W pushes a gradient computed at step S
//	ready S => true|false          can a pull that needs step S be answered?
//	waiting => have/want missing=[...]
//	stats => applied=A stale=S dup=D
//
// With -update the outcomes are rewritten from what the tracker does, so a
// change of behaviour shows up as a diff of the scenario files.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios found: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runScenario(t, file) })
	}
}

func runScenario(t *testing.T, file string) {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tr *Tracker
	var out []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		cmd, want, hasWant := strings.Cut(line, "=>")
		cmd = strings.TrimSpace(cmd)
		if cmd == "" || strings.HasPrefix(cmd, "#") {
			out = append(out, line)
			continue
		}
		got, err := exec(&tr, strings.Fields(cmd))
		if err != nil {
			got = "error: " + err.Error()
		}
		if got == "" {
			out = append(out, cmd)
			continue
		}
		out = append(out, fmt.Sprintf("%-28s => %s", cmd, got))
		if !*update && (!hasWant || strings.TrimSpace(want) != got) {
			t.Errorf("%s:%d: %s\n got: %s\nwant: %s", file, n, cmd, got, strings.TrimSpace(want))
		}
	}
	if *update {
		if err := os.WriteFile(file, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func exec(tr **Tracker, args []string) (string, error) {
	kv := func(name string) (int64, bool) {
		for _, a := range args[1:] {
			if k, v, ok := strings.Cut(a, "="); ok && k == name {
				n, err := strconv.ParseInt(v, 10, 64)
				return n, err == nil
			}
		}
		return 0, false
	}
	num := func(i int) int64 {
		n, _ := strconv.ParseInt(args[i], 10, 64)
		return n
	}
	switch args[0] {
	case "new":
		cfg := Config{Sync: args[1] == "sync"}
		r, _ := kv("r")
		n, _ := kv("n")
		s, _ := kv("staleness")
		step, _ := kv("step")
		cfg.ReplicasToAggregate, cfg.NumWorkers, cfg.MaxStaleness = int(r), int(n), s
		var err error
		*tr, err = New(cfg, step)
		return "", err
	case "push":
		v, err := (*tr).Push(int(num(1)), num(2))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s step=%d", v, (*tr).Step()), nil
	case "ready":
		return strconv.FormatBool((*tr).Ready(num(1))), nil
	case "waiting":
		have, want, missing := (*tr).Waiting()
		return fmt.Sprintf("%d/%d missing=%v", have, want, missing), nil
	case "stats":
		s := (*tr).Stats()
		return fmt.Sprintf("applied=%d stale=%d dup=%d", s.Applied, s.StaleDropped, s.DuplicateDrops), nil
	}
	return "", fmt.Errorf("unknown command %q", args[0])
}
