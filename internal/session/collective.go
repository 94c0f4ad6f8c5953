package session

import (
	"context"
	"fmt"
	"time"

	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/telemetry"
)

// Collective makes this worker's next collective call among all the
// workers, on ps 0: op "barrier" (values nil) returns once every worker
// has made its call of the same number; "sum", "mean" and "max" return
// the reduction of every worker's values, element by element, the same
// bits for all. Every worker must make the same sequence of collective
// calls. It waits at most wait for the others, logging every WaitLogEvery
// what it waits for; a call that gives up names the workers missing (one
// that died, or is done) and may be made again. After a ps failure it
// recovers and calls again.
func (s *Session) Collective(ctx context.Context, op string, values []float64, wait time.Duration) ([]float64, error) {
	start := time.Now()
	out, err := s.collective(ctx, op, values, wait)
	s.observe("collective", telemetry.Bytes{}, start, err)
	return out, err
}

func (s *Session) collective(ctx context.Context, op string, values []float64, wait time.Duration) ([]float64, error) {
	if wait <= 0 {
		return nil, fmt.Errorf("session: worker %d: collective call: wait %s: want > 0", s.worker, wait)
	}
	seq := s.collectives
	what := op
	if op != "barrier" {
		what = fmt.Sprintf("all_reduce %s of %d values", op, len(values))
	}
	for {
		stop := lifecycle.LogWait(s.cfg.WaitLogEvery, func(waited time.Duration) bool {
			s.cfg.Logf("worker %d: collective call #%d (%s) has waited %s for the other %d workers (gives up after %s)", s.worker, seq, what, waited.Round(time.Second), s.NumWorkers()-1, wait)
			return true
		})
		out, err := s.c.Collective(ctx, seq, op, values, s.NumWorkers(), wait)
		stop()
		if err == nil {
			s.collectives++
			return out, nil
		}
		if rerr := s.recover(ctx, err); rerr != nil {
			return nil, fmt.Errorf("session: worker %d: collective call #%d (%s): %w", s.worker, seq, what, rerr)
		}
	}
}
