package arch

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// grpcFiles are the packages that speak gRPC besides other transports,
// each with the one file that may import it: the rest of the package
// speaks the shard's error kinds (server) or the client's (client), so
// that a second transport (the binary data path) needs no gRPC.
var grpcFiles = map[string]string{
	"server": "grpc.go",
	"client": "grpc.go",
}

// TestGRPCInOneFile fails when a file of server or client other than its
// grpc.go imports a google.golang.org/grpc package, naming the file and
// line. Test files are not checked.
func TestGRPCInOneFile(t *testing.T) {
	for pkg, want := range grpcFiles {
		files, err := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files in internal/%s (%v)", pkg, pkg, err)
		}
		seen := false
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			for _, at := range grpcImports(t, path) {
				if filepath.Base(path) == want {
					seen = true
					continue
				}
				t.Errorf("%s: %s imports gRPC; only %s may (the package's one gRPC file)", pkg, at, want)
			}
		}
		if !seen {
			t.Errorf("%s: %s imports no gRPC: update grpcFiles", pkg, want)
		}
	}
}

// grpcImports are the places in the Go file at path that import a
// google.golang.org/grpc package, as "file:line: path".
func grpcImports(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if p == "google.golang.org/grpc" || strings.HasPrefix(p, "google.golang.org/grpc/") || strings.HasPrefix(p, "google.golang.org/genproto/googleapis/rpc/") {
			pos := fset.Position(imp.Pos())
			out = append(out, filepath.Base(pos.Filename)+":"+strconv.Itoa(pos.Line)+": "+p)
		}
	}
	return out
}
