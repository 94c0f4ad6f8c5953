package client

import (
	"context"
	"time"

	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Collective makes this worker's collective call number seq (a barrier, or
// an all-reduce of values by op: "sum", "mean" or "max") among the world's
// workers, on ps 0, which answers once every worker has made its call
// number seq, with the same reduction for all, or gives up after wait
// naming the workers it still waits for.
func (c *Client) Collective(ctx context.Context, seq int64, op string, values []float64, world int, wait time.Duration) ([]float64, error) {
	var out []float64
	// The call's own deadline is the ps's wait and a margin, so that the
	// ps's message, which names whom it waited for, arrives first.
	ctx, cancel := context.WithTimeout(ctx, wait+30*time.Second)
	defer cancel()
	err := c.watched(ctx, 0, func(ctx context.Context) error {
		resp, err := c.ps[0].Collective(ctx, &pb.CollectiveRequest{
			Worker: int32(c.opts.Worker), Seq: seq, Op: op, Values: values, World: int32(world),
			TimeoutMs: max(1, wait.Milliseconds()),
		})
		if err == nil {
			out = resp.GetValues()
		}
		return err
	})
	if err != nil {
		return nil, c.classify(0, err)
	}
	return out, nil
}
