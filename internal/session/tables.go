package session

import (
	"context"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/telemetry"
)

// PullTables reads the rows of several tables in one round trip per ps:
// for each r, the rows of r.Keys (distinct) of r.Table into r.Values
// (len(r.Keys)×dim values, row i for r.Keys[i]). A model with a table per
// field pulls its batch's rows with one call instead of one per table.
func (s *Session) PullTables(ctx context.Context, rows []Rows) error {
	start := time.Now()
	err := s.pullTables(ctx, rows)
	var n int64
	for _, r := range rows {
		n += 4 * int64(len(r.Values))
	}
	s.observe("pull_tables", telemetry.Bytes{PullSparse: n}, start, err)
	return err
}

func (s *Session) pullTables(ctx context.Context, rows []Rows) error {
	req := &client.Request{Pull: true}
	for _, r := range rows {
		if len(r.Keys) > 0 {
			req.SparseParams = append(req.SparseParams, client.Rows{Table: r.Table, Keys: r.Keys, Values: r.Values})
		}
	}
	if len(req.SparseParams) == 0 {
		return nil
	}
	for {
		call := s.c.Do(ctx, req)
		if call.Err == nil {
			return nil
		}
		if err := s.recover(ctx, call.Err); err != nil {
			return err
		}
	}
}
