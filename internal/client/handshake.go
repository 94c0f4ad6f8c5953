package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/paramserv/paramserv/internal/wire"
)

// helloTimeout bounds the wait for a ps's answer to the preface; a ps that
// does not speak the data path (an older one) does not answer.
const helloTimeout = 10 * time.Second

// errNoDataPath means the ps does not speak the data path.
var errNoDataPath = errors.New("the ps does not speak the data path")

// errVersion: the ps refused the data path version asked for.
var errVersion = errors.New("version not spoken")

// dial opens a data connection to addr asking for the given version: the
// preface, then the ps's hello. errVersion means the ps refused the
// version, errNoDataPath that it does not speak the data path. With
// threadReads the connection is read on the calling thread
// (Options.ThreadReads).
func dial(ctx context.Context, addr string, with func(context.Context, string) (net.Conn, error), version int, threadReads bool) (*dataConn, error) {
	if with == nil {
		var dl net.Dialer
		with = func(ctx context.Context, addr string) (net.Conn, error) { return dl.DialContext(ctx, "tcp", addr) }
	}
	nc, err := with(ctx, addr)
	if err != nil {
		return nil, withKind(ErrUnavailable, err)
	}
	deadline := time.Now().Add(helloTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = nc.SetDeadline(deadline)
	d := &dataConn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), deadline: true}
	if _, err := nc.Write(wire.PrefaceVersion(version)); err != nil {
		nc.Close()
		return nil, withKind(ErrUnavailable, err)
	}
	var hb [wire.HelloLen]byte
	if _, err := io.ReadFull(d.br, hb[:]); err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w (no answer to its preface: %v)", errNoDataPath, err)
	}
	h, err := wire.ParseHello(hb[:])
	if err == nil && h.Status == wire.HelloBadVersion && version != wire.DataVersion {
		nc.Close()
		return nil, errVersion
	}
	if err == nil && (h.Status != wire.HelloOK || h.Version != version || h.Slots < wire.CacheSlots || h.MaxCachedKeys < wire.MaxCachedKeys) {
		err = fmt.Errorf("it answered version %d, status %d, %d key slots of %d keys", h.Version, h.Status, h.Slots, h.MaxCachedKeys)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: %v", errNoDataPath, err)
	}
	if threadReads && d.br.Buffered() == 0 {
		// The ps says nothing more until asked.
		d.nc = newThreadConn(nc)
		_ = d.nc.SetDeadline(deadline) // cleared by the first call's send
		d.br.Reset(d.nc)
	}
	d.version = version
	d.incr = version >= wire.DataVersionIncremental
	d.dincr = version >= wire.DataVersionDenseIncremental
	return d, nil
}
