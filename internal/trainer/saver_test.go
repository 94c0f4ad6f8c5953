package trainer

import (
	"context"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/lifecycle"
)

// testSaver saves checkpoints as the chief does, for tests that save one
// themselves (lifecycle.SaveCheckpoint).
type testSaver struct {
	cfg Config
	c   *client.Client
}

func newSaver(cfg Config, c *client.Client, _ int64) testSaver { return testSaver{cfg, c} }

func (s testSaver) save(ctx context.Context, step int64) error {
	return lifecycle.SaveCheckpoint(ctx, s.cfg.lifecycle(), s.c, step)
}
