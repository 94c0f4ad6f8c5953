package sparse

import (
	"os"
	"testing"

	"github.com/paramserv/paramserv/internal/parallel/goroutines"
)

// TestMain runs the package's tests with tables whose large jobs run on
// four goroutines whatever the machine's cores, so that the race detector
// sees the parallel paths (the product's shell passes its own Runner).
func TestMain(m *testing.M) {
	defaultRunner = goroutines.Width(4)
	os.Exit(m.Run())
}
