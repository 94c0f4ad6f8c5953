package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Requests sent in pieces (the *Pieces calls): a request larger than
// wire.GRPCPiece comes as the pieces of its serialized bytes, the first
// declaring their whole size. receivePieces admits that size before it
// holds any of the rest (membound.go), puts the pieces together, and
// decodes the request, which then goes through the same checks and work as
// one sent whole (grpc.go).

// pieceTimeout bounds the wait for each next piece: a client that stops
// sending gives back what its call holds (and Init's turn) after it.
const pieceTimeout = 30 * time.Second

// errPieceStalled is a request whose next piece did not come within
// pieceTimeout.
var errPieceStalled = errors.New("server: the next piece did not come")

// grantKey is the context key of a gRPC call's grpcGrant.
type grantKey struct{}

// grantOf is the budget a gRPC call holds (tapStream), or nil.
func grantOf(ctx context.Context) *grpcGrant {
	g, _ := ctx.Value(grantKey{}).(*grpcGrant)
	return g
}

// receivePieces reads the pieces of a request of method (recv gives each
// next one, io.EOF after the last) into req. Init's are received one Init
// at a time; another request's bytes are taken from the budget of the
// gRPC calls (grpcGrant) before any after the first piece is read.
func (s *Server) receivePieces(ctx context.Context, recv func() (*pb.Piece, error), method string, req proto.Message) error {
	next, stop := pieceReader(ctx, recv)
	defer stop()
	invalid := func(format string, args ...any) error {
		return &shard.Error{Kind: shard.Invalid, Msg: fmt.Sprintf("ps %d: %s request in pieces: ", s.cfg.Task, method) + fmt.Sprintf(format, args...)}
	}
	p, err := next()
	if err == io.EOF {
		return invalid("no pieces")
	} else if err != nil {
		return err
	}
	size := p.Size
	if size <= 0 {
		return invalid("the first piece declares %d bytes", size)
	}
	if err := s.piecesAdmit(method, size); err != nil {
		return err
	}
	if method == "Init" {
		if !s.initPieces.TryLock() {
			return &busyError{fmt.Sprintf("ps %d: another Init is being received in pieces: try again", s.cfg.Task)}
		}
		defer s.initPieces.Unlock()
	} else if g := grantOf(ctx); g != nil {
		if err := g.resize(grpcStreamCost + size); err != nil {
			return err
		}
	}
	// Grown as pieces come, so that a declared size that is never sent
	// is never allocated.
	buf := make([]byte, 0, min(size, 4<<20))
	for {
		if int64(len(buf))+int64(len(p.Data)) > size {
			return invalid("the pieces hold more than the %d bytes the first declared", size)
		}
		buf = append(buf, p.Data...)
		if int64(len(buf)) == size {
			break
		}
		if p, err = next(); err == io.EOF {
			return invalid("the pieces end after %d of the %d bytes declared", len(buf), size)
		} else if errors.Is(err, errPieceStalled) {
			return fmt.Errorf("ps %d: %s request in pieces: %w within %s (%d of %d bytes received)", s.cfg.Task, method, err, pieceTimeout, len(buf), size)
		} else if err != nil {
			return err
		}
	}
	if err := proto.Unmarshal(buf, req); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// pieceReader gives the pieces recv reads, each waited for at most
// pieceTimeout; stop ends its goroutine, which ends by itself too once recv
// fails (the call's end fails it).
func pieceReader(ctx context.Context, recv func() (*pb.Piece, error)) (next func() (*pb.Piece, error), stop func()) {
	type got struct {
		p   *pb.Piece
		err error
	}
	want, out, done := make(chan struct{}), make(chan got), make(chan struct{})
	go func() {
		for {
			select {
			case <-want:
			case <-done:
				return
			}
			p, err := recv()
			select {
			case out <- got{p, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	next = func() (*pb.Piece, error) {
		select {
		case want <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		t := time.NewTimer(pieceTimeout)
		defer t.Stop()
		select {
		case g := <-out:
			return g.p, g.err
		case <-t.C:
			return nil, errPieceStalled
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return next, func() { close(done) }
}
