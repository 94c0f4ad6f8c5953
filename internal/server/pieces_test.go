package server

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/wire/pb"
)

// piecesOf reads in as a stream of pieces: each a little-endian int64
// size, a uint16 length and that many bytes, until in runs out.
func piecesOf(in []byte) func() (*pb.Piece, error) {
	return func() (*pb.Piece, error) {
		if len(in) < 10 {
			return nil, io.EOF
		}
		p := &pb.Piece{Size: int64(binary.LittleEndian.Uint64(in))}
		n := min(int(binary.LittleEndian.Uint16(in[8:])), len(in)-10)
		p.Data, in = in[10:10+n], in[10+n:]
		return p, nil
	}
}

// encodePieces is piecesOf's input for b cut into pieces of n bytes, the
// first declaring size.
func encodePieces(b []byte, size int64, n int) []byte {
	var out []byte
	for off := 0; off < len(b) || off == 0; off += n {
		d := b[off:min(off+n, len(b))]
		s := int64(0)
		if off == 0 {
			s = size
		}
		out = binary.LittleEndian.AppendUint64(out, uint64(s))
		out = binary.LittleEndian.AppendUint16(out, uint16(len(d)))
		out = append(out, d...)
		if len(b) == 0 {
			break
		}
	}
	return out
}

// FuzzReceivePieces puts arbitrary pieces together as an Init and as a
// push: whatever they declare and hold, receivePieces returns a request
// or an error, never holds more than the size it admitted, and gives back
// what the call took. Seeds: an Init in three pieces, pieces holding more
// or less than they declare, a size over the limit, none.
func FuzzReceivePieces(f *testing.F) {
	init, err := proto.Marshal(&pb.InitRequest{Vars: []*pb.VarSpec{{Name: "w", Shape: []int64{3}, Init: f32(1, 2, 3)}}, NumWorkers: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(encodePieces(init, int64(len(init)), 7))
	f.Add(encodePieces(init, int64(len(init))-1, 7))
	f.Add(encodePieces(init, int64(len(init))+1, 100))
	f.Add(encodePieces(init, 1<<40, 100))
	f.Add(encodePieces(nil, 0, 1))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		s := New(Config{NumWorkers: 1})
		for _, method := range []string{"Init", "Push"} {
			g, err := s.grpcAcquire(grpcStreamCost)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.WithValue(context.Background(), grantKey{}, g)
			var req proto.Message = &pb.InitRequest{}
			if method == "Push" {
				req = &pb.PushRequest{}
			}
			err = s.receivePieces(ctx, piecesOf(in), method, req)
			if err == nil && proto.Size(req) > len(in) {
				t.Fatalf("%s: a request of %d bytes from %d bytes of pieces", method, proto.Size(req), len(in))
			}
			if err != nil && (strings.Contains(err.Error(), "panic") || errors.Is(err, io.EOF)) {
				t.Fatalf("%s: %v", method, err)
			}
			g.release()
			if held := s.GRPCBuffered(); held != 0 {
				t.Fatalf("%s: %d bytes held after the call", method, held)
			}
		}
		if !s.initPieces.TryLock() {
			t.Fatal("Init's turn not given back")
		}
	})
}
