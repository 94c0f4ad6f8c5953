// Package scenario runs golden scenario files: scripts of commands, each
// followed by the output the code under test gives, so that a reviewer
// reads a protocol as a diff (in the manner of etcd-io/raft's interaction
// tests and cockroachdb/pebble's datadriven files).
//
// A script is plain text. A line beginning with '#' is a comment, a blank
// line is kept, every other unindented line is a command, and the lines
// after a command indented by two spaces are its output:
//
//	# a comment
//	push 0 step=3
//	  apply step=4
//
// Run reruns every command of every file and compares the whole file; with
// the test flag -update it rewrites the files with the output the code
// gives now, so a change of behaviour shows up in review as a diff of
// testdata. The packages with scenarios (consistency, table/sparse, shard)
// share this one driver; each supplies the meaning of its commands.
package scenario

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata scenario files with the output the code gives now")

// Cmd is one command line: its name, its positional arguments, and its
// key=value arguments.
type Cmd struct {
	Name  string
	Args  []string
	KV    map[string]string
	Where string // file:line, for messages
}

// Int returns the key=value argument name as an integer, or def if absent;
// a value that is not an integer fails the test.
func (c Cmd) Int(t testing.TB, name string, def int64) int64 {
	t.Helper()
	v, ok := c.KV[name]
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: %s=%q: want an integer", c.Where, name, v)
	}
	return n
}

// Has reports whether the key=value argument name is present.
func (c Cmd) Has(name string) bool { _, ok := c.KV[name]; return ok }

// Arg returns positional argument i as an integer; a missing or malformed
// one fails the test.
func (c Cmd) Arg(t testing.TB, i int) int64 {
	t.Helper()
	if i >= len(c.Args) {
		t.Fatalf("%s: %s needs %d arguments, got %v", c.Where, c.Name, i+1, c.Args)
	}
	n, err := strconv.ParseInt(c.Args[i], 10, 64)
	if err != nil {
		t.Fatalf("%s: argument %q: want an integer", c.Where, c.Args[i])
	}
	return n
}

// A Runner executes one file's commands in order; a fresh one is made per
// file. It returns the command's output (any number of lines, "" for none);
// an error is printed as "error: ..." in the output, so scripts can expect
// errors too.
type Runner func(t *testing.T, c Cmd) (string, error)

// Run runs every file matching testdata/*.txt in the package's directory;
// newRunner makes the runner of one file.
func Run(t *testing.T, newRunner func() Runner) {
	t.Helper()
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in testdata/: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got := runScript(t, file, string(raw), newRunner())
			if got == string(raw) {
				return
			}
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			t.Errorf("%s: output differs (rerun with -update to accept):\n%s", file, Diff(string(raw), got))
		})
	}
}

func runScript(t *testing.T, file, script string, run Runner) string {
	var b strings.Builder
	for n, line := range strings.Split(strings.TrimRight(script, "\n"), "\n") {
		if strings.HasPrefix(line, "  ") {
			continue // old output; regenerated below
		}
		b.WriteString(line + "\n")
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		c := Cmd{Name: fields[0], KV: map[string]string{}, Where: fmt.Sprintf("%s:%d", file, n+1)}
		for _, f := range fields[1:] {
			if k, v, ok := strings.Cut(f, "="); ok {
				c.KV[k] = v
				continue
			}
			c.Args = append(c.Args, f)
		}
		out, err := run(t, c)
		if err != nil {
			out = strings.TrimSpace(out + "\nerror: " + err.Error())
		}
		if out == "" {
			continue
		}
		for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			b.WriteString("  " + l + "\n")
		}
	}
	return b.String()
}

// Diff is a line diff of want and got for a failure message: the lines that
// differ, with their numbers.
func Diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			fmt.Fprintf(&b, "line %d:\n  want %q\n   got %q\n", i+1, a, c)
		}
	}
	return b.String()
}
