package client

import (
	"context"
	"fmt"

	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// PullRows reads the rows of keys of table into values (len(keys)*dim) once
// the global step reaches minStep.
func (c *Client) PullRows(ctx context.Context, minStep int64, table string, keys []uint64, values []float32) (int64, error) {
	call := c.Do(ctx, &Request{Pull: true, MinStep: minStep, SparseParams: []Rows{{Table: table, Keys: keys, Values: values}}})
	return call.Step, call.Err
}

// PushRows pushes gradients (len(keys)*dim) for the rows of keys of table,
// computed at step.
func (c *Client) PushRows(ctx context.Context, step int64, table string, keys []uint64, grads []float32) (int64, bool, error) {
	call := c.Do(ctx, &Request{Push: true, Step: step, SparseGrads: []Rows{{Table: table, Keys: keys, Values: grads}}})
	return call.Step, call.Dropped, call.Err
}

// scatterFunc writes ps i's answer for its share of the pulled rows back
// into the caller's Values.
type scatterFunc = func(ps int, got []*pb.SparseRows) error

// splitRows cuts every Rows into the share of each ps, by the owner of each
// key (placement.KeyShard). With one ps the shares are views of the
// caller's slices. For a pull it also returns how to put the answers back.
func (c *Client) splitRows(rows []Rows, isPush bool) ([][]*pb.SparseRows, scatterFunc, error) {
	n := len(c.ps)
	out := make([][]*pb.SparseRows, n)
	noop := func(int, []*pb.SparseRows) error { return nil }
	if len(rows) == 0 {
		return out, noop, nil
	}
	dims := make([]int, len(rows))
	for j, r := range rows {
		dim, ok := c.tableDim[r.Table]
		if !ok {
			return nil, nil, fmt.Errorf("client: unknown table %q", r.Table)
		}
		if len(r.Values) != len(r.Keys)*dim {
			return nil, nil, fmt.Errorf("client: table %q: %d keys of dim %d need %d values, got %d", r.Table, len(r.Keys), dim, len(r.Keys)*dim, len(r.Values))
		}
		dims[j] = dim
	}
	if n == 1 {
		for _, r := range rows {
			sr := &pb.SparseRows{Table: r.Table, Keys: wire.Uint64Bytes(r.Keys)}
			if isPush {
				sr.Values = wire.Float32Bytes(r.Values)
			}
			out[0] = append(out[0], sr)
		}
		return out, func(_ int, got []*pb.SparseRows) error {
			if len(got) != len(rows) {
				return fmt.Errorf("ps answered %d sparse tables, asked for %d", len(got), len(rows))
			}
			for j, g := range got {
				if len(g.Values) != 4*len(rows[j].Values) {
					return fmt.Errorf("table %q: ps answered %d bytes, want %d", rows[j].Table, len(g.Values), 4*len(rows[j].Values))
				}
				wire.DecodeFloat32s(rows[j].Values, g.Values)
			}
			return nil
		}, nil
	}
	// pos[j][ps] lists, for rows[j], the indices of the keys sent to ps.
	pos := make([][][]int32, len(rows))
	for j, r := range rows {
		dim := dims[j]
		pos[j] = make([][]int32, n)
		owner := make([]int32, len(r.Keys))
		counts := make([]int, n)
		for i, k := range r.Keys {
			o := placement.KeyShard(k, n)
			owner[i] = int32(o)
			counts[o]++
		}
		keys := make([][]uint64, n)
		vals := make([][]float32, n)
		for ps := range n {
			keys[ps] = make([]uint64, 0, counts[ps])
			pos[j][ps] = make([]int32, 0, counts[ps])
			if isPush {
				vals[ps] = make([]float32, 0, counts[ps]*dim)
			}
		}
		for i, k := range r.Keys {
			o := owner[i]
			keys[o] = append(keys[o], k)
			pos[j][o] = append(pos[j][o], int32(i))
			if isPush {
				vals[o] = append(vals[o], r.Values[i*dim:(i+1)*dim]...)
			}
		}
		for ps := range n {
			sr := &pb.SparseRows{Table: r.Table, Keys: wire.Uint64Bytes(keys[ps])}
			if isPush {
				sr.Values = wire.Float32Bytes(vals[ps])
			}
			out[ps] = append(out[ps], sr)
		}
	}
	return out, func(ps int, got []*pb.SparseRows) error {
		if len(got) != len(rows) {
			return fmt.Errorf("ps answered %d sparse tables, asked for %d", len(got), len(rows))
		}
		for j, g := range got {
			dim := dims[j]
			p := pos[j][ps]
			if len(g.Values) != 4*dim*len(p) {
				return fmt.Errorf("table %q: ps answered %d bytes, want %d", rows[j].Table, len(g.Values), 4*dim*len(p))
			}
			vals, err := wire.Float32s(g.Values)
			if err != nil {
				return err
			}
			for k, i := range p {
				copy(rows[j].Values[int(i)*dim:(int(i)+1)*dim], vals[k*dim:(k+1)*dim])
			}
		}
		return nil
	}, nil
}
