package shard

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/paramserv/paramserv/internal/parallel/goroutines"
)

// TestMain fails the run if a test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testRunner is the Runner the tests give restores and shards whose large
// jobs should run on several goroutines, as the ps's do, whatever the
// machine's cores: so the race detector sees them.
var testRunner = goroutines.Width(4)
