package paramserv

import (
	"context"

	"github.com/paramserv/paramserv/internal/session"
)

// PullTables reads the rows of several tables at once, in one round trip
// per ps: for each r, the rows of r.Keys (distinct) of r.Table into
// r.Values (len(r.Keys)×Dim values, row i for r.Keys[i]). A model with a
// table per feature field reads its batch's rows with one call where
// PullRows would take one per table. Keys not seen before read as the
// table's initial value. Like PullRows, it first waits for the calls in
// flight.
func (w *Worker) PullTables(ctx context.Context, rows []Rows) error {
	w.waitInFlight()
	if err := w.closedErr("PullTables"); err != nil {
		return err
	}
	rs := make([]session.Rows, len(rows))
	for i, r := range rows {
		rs[i] = session.Rows{Table: r.Table, Keys: r.Keys, Values: r.Values}
	}
	return ctxErr(ctx, w.s.PullTables(ctx, rs))
}
