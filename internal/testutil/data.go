// Package testutil holds helpers shared by the tests of several packages.
package testutil

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// DataDir returns the directory of the shared datasets: $PARAMSERV_DATA if
// set, else ../shared/data beside the repository. If sub (a file or folder
// below it, such as "mnist" or "a9a/a9a") does not exist, the test fails
// under CI (CI=true), where the data must be present, and is skipped
// elsewhere with a message saying where the data was looked for.
func DataDir(tb testing.TB, sub string) string {
	tb.Helper()
	dir := os.Getenv("PARAMSERV_DATA")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		// file is <repo>/internal/testutil/data.go
		dir = filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "data")
	}
	if _, err := os.Stat(filepath.Join(dir, sub)); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("dataset %s missing under CI: %v (set PARAMSERV_DATA or provide ../shared/data)", sub, err)
		}
		tb.Skipf("dataset %s not found (%v); set PARAMSERV_DATA to the shared data directory", sub, err)
	}
	return dir
}
