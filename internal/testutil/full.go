package testutil

import (
	"os"
	"testing"
)

// FullEnv is the variable that asks for the full set of tests.
// ./scripts/test --full and --long set it (CI runs --full); CI=true counts
// too.
const FullEnv = "PARAMSERV_TEST_FULL"

// Full skips the test unless the full set of tests was asked for, saying
// why it is left out of the quick run and how to run it. It is for the
// slowest real-process tests whose behaviour a quicker test also covers
// (the Python examples, a browser, a second Go module), so that
// ./scripts/test without flags stays within ten minutes on two cores.
func Full(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv(FullEnv) == "1" || os.Getenv("CI") == "true" {
		return
	}
	tb.Skipf("in the full run only (./scripts/test --full, or %s=1): %s", FullEnv, why)
}
