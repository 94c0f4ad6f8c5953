package arch

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// moduleImports are the module's packages that the package in dir (a path
// from the repository root) imports in its non-test files.
func moduleImports(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("../..", dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if rest, ok := strings.CutPrefix(p, module); ok && !slices.Contains(out, rest) {
				out = append(out, rest)
			}
		}
	}
	return out
}

// TestWorkerSideLeavesOutThePS fails when the worker side (the Python
// client library and the worker session under the public API) reaches
// the ps's shell, trainer, or the disk tier, whose store (pebble and its
// dependencies, about 170 packages) would then be compiled into every
// wheel (issue 27: pip wheel ./python) and linked into the library. It
// names the chain of imports that got there.
func TestWorkerSideLeavesOutThePS(t *testing.T) {
	banned := map[string]string{
		"internal/trainer":    "the ps's and the built-in models' shell",
		"internal/table/tier": "the disk tier (pebble)",
	}
	for _, root := range []string{"python/native", "internal/session"} {
		if _, err := os.Stat(filepath.Join("../..", root)); err != nil {
			t.Fatal(err) // moved: say where the worker side lives now
		}
		from := map[string]string{root: ""}
		queue := []string{root}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			for _, im := range moduleImports(t, p) {
				if _, seen := from[im]; seen {
					continue
				}
				from[im] = p
				if why, bad := banned[im]; bad {
					chain := []string{im}
					for q := p; q != ""; q = from[q] {
						chain = append([]string{q}, chain...)
					}
					t.Errorf("%s reaches %s (%s): %s", root, im, why, strings.Join(chain, " -> "))
					continue
				}
				queue = append(queue, im)
			}
		}
	}
}
