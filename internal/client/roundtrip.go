package client

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/paramserv/paramserv/internal/wire"
)

// roundTrip sends ps i its part of the call and reads the answer into the
// caller's params and rows. On an error that leaves the connection unusable
// it closes it and clears cs.conns[i].
func (dp *dataPath) roundTrip(ctx context.Context, cs *callState, i int, push, pull bool, minStep int64) (step int64, dropped bool, err error) {
	if err := dp.begin(ctx, cs, i, push, pull, minStep); err != nil {
		return 0, false, err
	}
	return dp.end(ctx, cs, i, push, pull, minStep)
}

// begin is the first half of roundTrip: it sends ps i its part of the
// call; end reads the answer.
func (dp *dataPath) begin(ctx context.Context, cs *callState, i int, push, pull bool, minStep int64) error {
	d := cs.conns[i]
	if d == nil {
		// An earlier round trip of this call broke the connection.
		var err error
		if d, err = dp.ps[i].get(ctx); err != nil {
			return err
		}
		cs.conns[i] = d
	}
	if err := dp.send(ctx, d, cs, i, push, pull, minStep, dp.c.opts.NoKeyCache); err != nil {
		return dp.broke(ctx, cs, i, err)
	}
	return nil
}

// end reads ps i's answer to what begin sent; after a key cache miss it
// sends the request again with its keys.
func (dp *dataPath) end(ctx context.Context, cs *callState, i int, push, pull bool, minStep int64) (step int64, dropped bool, err error) {
	d := cs.conns[i]
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := dp.send(ctx, d, cs, i, push, pull, minStep, true); err != nil {
				return 0, false, dp.broke(ctx, cs, i, err)
			}
		}
		step, dropped, err = dp.recv(d, cs, i, pull)
		var re *replyError
		if err == nil || errors.As(err, &re) {
			// The connection is in step: an error reply came whole. The ps
			// keeps nothing the request asked it to keep.
			if err != nil {
				d.slot = [wire.CacheSlots]uint64{}
				if attempt == 0 && re.kind == wire.KindCacheMiss {
					continue
				}
				err = re.err
			}
			return step, dropped, err
		}
		return 0, false, dp.broke(ctx, cs, i, err)
	}
}

// broke closes ps i's connection after err left it unusable, clears
// cs.conns[i], and returns the call's error.
func (dp *dataPath) broke(ctx context.Context, cs *callState, i int, err error) error {
	d := cs.conns[i]
	d.nc.Close()
	cs.conns[i] = nil
	if d.silent != nil {
		return d.silent
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The connection's deadlines come from ctx: it is done, or
		// about to be (its timer may not have fired yet).
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	var fe *wire.FrameError
	var le *LayoutError
	switch {
	case errors.As(err, &le), errors.As(err, &fe):
		// A reply of another layout, or one that breaks the format: not
		// a ps to wait for.
	case ctx.Err() != nil:
		err = ctx.Err()
	case !errors.Is(err, ErrUnavailable):
		err = withKind(ErrUnavailable, err)
	}
	return err
}
