package paramserv_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/paramserv/paramserv"
)

// A result file is whole JSON at its path, with nothing left beside it; a
// directory that does not exist is an error, not a partial file.
func TestWriteResultFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	if err := paramserv.WriteResultFile(path, map[string]any{"test_rmse": 0.9}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]float64
	if err := json.Unmarshal(b, &r); err != nil || r["test_rmse"] != 0.9 {
		t.Fatalf("read back %q: %v, %v", b, r, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the directory, want the result alone", len(entries))
	}
	if err := paramserv.WriteResultFile(filepath.Join(dir, "missing", "r.json"), 1); err == nil {
		t.Error("a result file in a missing directory was accepted")
	}
}
