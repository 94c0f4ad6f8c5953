package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/paramserv/paramserv/"

// seams are the leaf packages the cores are given besides one another:
// checked as the cores are.
var seams = []string{"parallel", "format", "ckptformat"}

// forbidden are the imports a core may not have, each with the reason.
var forbidden = map[string]string{
	"net":                                   "sockets belong to the shells",
	"os":                                    "files and processes belong to the shells",
	"sync":                                  "a core has no locks and waits for nothing; its caller serialises it",
	module + "internal/wire":                "the wire is an edge (shared formats live in internal/format)",
	module + "internal/wire/pb":             "the wire is an edge",
	module + "internal/checkpoint":          "checkpoint files are an edge (the types of their contents live in internal/ckptformat)",
	module + "internal/parallel/goroutines": "the shell passes the Runner; a core does not pick the goroutines itself",
}

// debts are impurities known and left for a later move, by core and
// import ("shard imports …"), each with what is left to do. The test fails
// when a debt is paid and still listed, so the list only shrinks. None is
// left.
var debts = map[string]string{}

// clocks are the functions of package time that read the clock or wait
// on it: time enters a core as an argument.
var clocks = []string{"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "Tick", "NewTimer", "NewTicker"}

// cores reads the list of deterministic cores from docs/ARCHITECTURE.md:
// the backquoted package names each followed by its parenthesised account
// in the "Deterministic cores" item.
func cores(t *testing.T) []string {
	b, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	i := strings.Index(page, "**Deterministic cores**")
	if i < 0 {
		t.Fatal(`docs/ARCHITECTURE.md has no "**Deterministic cores**" item`)
	}
	item := page[i:]
	if j := strings.Index(item, "\n- "); j >= 0 {
		item = item[:j]
	}
	var pkgs []string
	for _, m := range regexp.MustCompile("`([a-z][a-z/]*)`\\s+\\(").FindAllStringSubmatch(item, -1) {
		pkgs = append(pkgs, m[1])
	}
	if len(pkgs) < 6 {
		t.Fatalf("docs/ARCHITECTURE.md lists %d deterministic cores (%v); the test reads `name` ( account ) in that item", len(pkgs), pkgs)
	}
	return pkgs
}

// TestCoresArePure fails when a package docs/ARCHITECTURE.md lists as a
// deterministic core (or a seam it is given) imports what a core may not,
// reads the clock or starts a goroutine, naming the file and line. Test
// files are not checked: a test may use what it likes.
func TestCoresArePure(t *testing.T) {
	pkgs := append(cores(t), seams...)
	owed := map[string]bool{}
	for _, pkg := range pkgs {
		dir := filepath.Join("..", pkg)
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Errorf("core %q: no Go files in internal/%s (%v)", pkg, pkg, err)
			continue
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			for _, p := range impurities(t, f) {
				if imp, ok := strings.CutPrefix(p.what, "imports "); ok {
					if why, ok := debts[pkg+" imports "+imp]; ok {
						owed[pkg+" imports "+imp] = true
						t.Logf("core %s: %s: %s (a known debt: %s)", pkg, p.at, p.what, why)
						continue
					}
				}
				t.Errorf("core %s: %s: %s: %s", pkg, p.at, p.what, p.why)
			}
		}
	}
	for d := range debts {
		if !owed[d] {
			t.Errorf("the debt %q is paid: remove it from debts", d)
		}
	}
}

// maxFuncLines is the longest a function of a core may be, counted from
// its func line to its closing brace.
const maxFuncLines = 120

// TestCoreFunctionsShort fails on a function of a core longer than
// maxFuncLines: a reader should see a core's decisions one screenful at a
// time.
func TestCoreFunctionsShort(t *testing.T) {
	for _, pkg := range append(cores(t), seams...) {
		files, _ := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok {
					if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
						t.Errorf("core %s: %s:%d: %s is %d lines, more than %d", pkg, filepath.Base(path), fset.Position(fd.Pos()).Line, fd.Name.Name, n, maxFuncLines)
					}
				}
			}
		}
	}
}

// impurity is one thing a core may not do, where it does it.
type impurity struct{ at, what, why string }

// impurities lists what in the Go file at path a core may not do.
func impurities(t *testing.T, path string) []impurity {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []impurity
	at := func(n ast.Node) string {
		p := fset.Position(n.Pos())
		return filepath.Base(p.Filename) + ":" + strconv.Itoa(p.Line)
	}
	timeName := "" // the name package time has in this file
	for _, im := range f.Imports {
		ip, _ := strconv.Unquote(im.Path.Value)
		if why, bad := forbidden[ip]; bad || strings.HasPrefix(ip, "net/") || strings.HasPrefix(ip, "os/") {
			if !bad {
				why = "the OS and the network belong to the shells"
			}
			out = append(out, impurity{at(im), "imports " + ip, why})
		}
		if ip == "time" {
			timeName = "time"
			if im.Name != nil {
				timeName = im.Name.Name
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			out = append(out, impurity{at(n), "starts a goroutine", "run the pieces through a parallel.Runner the caller passes"})
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && timeName != "" && x.Name == timeName && slices.Contains(clocks, n.Sel.Name) {
				out = append(out, impurity{at(n), "reads the clock (time." + n.Sel.Name + ")", "take the time as an argument"})
			}
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "runtime" && n.Sel.Name == "GOMAXPROCS" {
				out = append(out, impurity{at(n), "sizes its work by the machine (runtime.GOMAXPROCS)", "ask the Runner's Width"})
			}
		}
		return true
	})
	return out
}

// TestImpuritiesFound: the check finds each kind of impurity in a file
// that has them all (testdata/impure.go.txt), so a core that gained one
// would fail TestCoresArePure.
func TestImpuritiesFound(t *testing.T) {
	got := impurities(t, "testdata/impure.go.txt")
	var whats []string
	for _, p := range got {
		whats = append(whats, p.at+" "+p.what)
	}
	want := []string{
		"impure.go.txt:4 imports net",
		"impure.go.txt:5 imports os/exec",
		"impure.go.txt:6 imports sync",
		"impure.go.txt:9 imports " + module + "internal/wire",
		"impure.go.txt:13 starts a goroutine",
		"impure.go.txt:14 reads the clock (time.Now)",
		"impure.go.txt:15 reads the clock (time.Since)",
		"impure.go.txt:16 sizes its work by the machine (runtime.GOMAXPROCS)",
	}
	if !slices.Equal(whats, want) {
		t.Errorf("found\n%s\nwant\n%s", strings.Join(whats, "\n"), strings.Join(want, "\n"))
	}
}
