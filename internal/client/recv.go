package client

import (
	"errors"
	"fmt"
	"io"

	"github.com/paramserv/paramserv/internal/wire"
)

// replyError is an error reply from the ps (or a whole reply the client
// refuses, such as one of a restarted ps): the call failed, the
// connection is fine. kind is the ps's kind of it (0: the client's).
type replyError struct {
	kind wire.ErrorKind
	err  error
}

func (e *replyError) Error() string { return e.err.Error() }

// recv reads the reply of the request send wrote to ps i into the
// caller's params and rows.
func (dp *dataPath) recv(d *dataConn, cs *callState, i int, pull bool) (int64, bool, error) {
	defer d.releaseSent()
	c, req := dp.c, cs.req
	incr, held := d.sent.held != nil, d.sent.held
	dincr, ds, heldSince := d.sent.ds != nil, d.sent.ds, d.sent.heldSince
	if _, err := io.ReadFull(d.br, d.hdr[:]); err != nil {
		return 0, false, err
	}
	h, err := wire.ParseRepHeader(d.hdr[:])
	if err != nil {
		return 0, false, err
	}
	body := &d.body
	*body = wire.BodyReader{R: d.br, Left: h.Body}
	if h.Err {
		kind, msg, err := wire.ReadErrorBody(body, d.version)
		if err != nil {
			return 0, false, err
		}
		return 0, false, &replyError{kind, &psError{kind, msg}}
	}
	if !pull {
		if h.Dense != 0 || h.Sparse != 0 || h.Body != 0 {
			return 0, false, fmt.Errorf("data path: the ps answered a push with %d bytes of values", h.Body)
		}
		return h.Step, h.Dropped, dp.incarnation(i, h)
	}
	wantDense := 0
	if req.Params != nil {
		wantDense = len(c.byPS[i])
	}
	if h.Dense != wantDense || h.Sparse != len(req.SparseParams) {
		return 0, false, dp.layoutError(i, body, h.Dense, h.Sparse,
			fmt.Sprintf("the ps answered %d variables and %d tables, want %d and %d", h.Dense, h.Sparse, wantDense, len(req.SparseParams)))
	}
	if dincr {
		if err := d.dense.head(body, denseBlocks(c.byPS[i])); err != nil {
			if errors.Is(err, errBlockCount) {
				return 0, false, dp.layoutError(i, body, h.Dense, h.Sparse, err.Error())
			}
			return 0, false, err
		}
		if (heldSince == 0 || h.Incarnation != ds.inc) && d.dense.sent != denseBlocks(c.byPS[i]) {
			return 0, false, fmt.Errorf("data path: the ps sent %d of %d dense blocks, the worker holds none of them", d.dense.sent, denseBlocks(c.byPS[i]))
		}
	}
	if err := dp.readDense(d, cs, i, h, body, dincr, ds); err != nil {
		return 0, false, err
	}
	if dincr {
		// Every block now holds the answer's version: a block not sent
		// was unchanged up to it.
		ds.inc, ds.since = h.Incarnation, d.dense.ver
		ds.tally(denseBlocks(c.byPS[i]), d.dense.sent)
	}
	if incr {
		if err := d.inc.answer(held, cs, i, c.tableDim, h.Incarnation, body); err != nil {
			return 0, false, err
		}
	}
	if !incr {
		if err := dp.readRows(d, cs, i, body); err != nil {
			return 0, false, err
		}
	}
	if body.Left != 0 {
		return 0, false, fmt.Errorf("data path: %d bytes after the last section of the reply", body.Left)
	}
	return h.Step, h.Dropped, dp.incarnation(i, h)
}

// readDense reads the dense sections of ps i's reply into the caller's
// params (with dincr, the blocks sent, into them and the dense store ds).
func (dp *dataPath) readDense(d *dataConn, cs *callState, i int, h wire.RepHeader, body *wire.BodyReader, dincr bool, ds *denseStore) error {
	c, req := dp.c, cs.req
	var err error
	var name []byte
	for range h.Dense {
		if name, err = body.Name(name[:0], "variable"); err != nil {
			return err
		}
		cnt, err := body.Uint32("value count")
		if err != nil {
			return err
		}
		p, ok := c.part[string(name)]
		want := p.Len
		if dincr && ok && p.PS == i {
			want = d.dense.count(p.Len)
		}
		if !ok || p.PS != i || cnt != int64(want) {
			detail := fmt.Sprintf("ps sent unknown variable %q", name)
			if ok && p.PS == i {
				detail = fmt.Sprintf("ps sent %d bytes for %q, want %d", 4*cnt, name, 4*want)
			}
			return &LayoutError{PS: i, Addr: dp.ps[i].addr, Detail: detail,
				Have: fmt.Sprintf("%d variables and %d tables, among them %s[%d]", h.Dense, h.Sparse, name, cnt), Want: c.layoutOf(i)}
		}
		dst := req.Params[c.varOf[p.Name]][p.Offset : p.Offset+p.Len]
		if dincr {
			if err := d.dense.read(ds, p.Name, dst, body); err != nil {
				return err
			}
			continue
		}
		if err := body.FloatsInto(dst, "values"); err != nil {
			return err
		}
	}
	return nil
}

// readRows reads the sparse sections of ps i's full pull into the
// caller's rows.
func (dp *dataPath) readRows(d *dataConn, cs *callState, i int, body *wire.BodyReader) error {
	c, req, n := dp.c, cs.req, len(dp.ps)
	for j, r := range req.SparseParams {
		e := cs.pull[j]
		dim := c.tableDim[r.Table]
		cnt, err := body.Uint32("value count")
		if err != nil {
			return err
		}
		want := len(e.keysOf(i)) * dim
		if cnt != int64(want) {
			return fmt.Errorf("table %q: ps answered %d bytes, want %d", r.Table, 4*cnt, 4*want)
		}
		if n == 1 {
			if err := body.FloatsInto(r.Values, "rows"); err != nil {
				return err
			}
			continue
		}
		vals := d.scratch[:want]
		if err := body.FloatsInto(vals, "rows"); err != nil {
			return err
		}
		for k, at := range e.pos[i] {
			copy(r.Values[int(at)*dim:(int(at)+1)*dim], vals[k*dim:(k+1)*dim])
		}
	}
	return nil
}

// layoutError describes the variables a reply of ps i holds (dense of
// them, then sparse tables), read from its body, against the model's.
func (dp *dataPath) layoutError(i int, body *wire.BodyReader, dense, sparse int, detail string) error {
	var have []string
	var name, skip []byte
	var err error
	// The first few, reading at most a few MiB of values past: the
	// connection is closed after.
	for range min(dense, 8) {
		if name, err = body.Name(name[:0], "variable"); err != nil {
			break
		}
		cnt, err := body.Uint32("value count")
		if err != nil || cnt > body.Left/4 {
			break
		}
		have = append(have, fmt.Sprintf("%s[%d]", name, cnt))
		if 4*cnt > 4<<20 {
			break
		}
		if skip, err = body.Bytes(skip[:0], int(4*cnt), "values"); err != nil {
			break
		}
	}
	if len(have) < dense {
		have = append(have, "...")
	}
	return &LayoutError{PS: i, Addr: dp.ps[i].addr, Detail: detail, Have: fmt.Sprintf("%d variables %v and %d tables", dense, have, sparse), Want: dp.c.layoutOf(i)}
}

// incarnation checks a whole, well-formed reply's incarnation; a changed
// one comes back as a reply error, so the connection is kept.
func (dp *dataPath) incarnation(i int, h wire.RepHeader) error {
	if err := dp.c.checkIncarnation(i, h.Incarnation); err != nil {
		return &replyError{err: err}
	}
	return nil
}
