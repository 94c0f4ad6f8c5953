package shard

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/paramserv/paramserv/internal/parallel/goroutines"
)

// TestMain fails the run if a test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testRunner is the Runner the tests give restores and shards whose large
// jobs should run on every core, as the ps's do: so the race detector sees
// the parallel paths, and the benchmarks time what the ps runs.
var testRunner = goroutines.OnCores()
