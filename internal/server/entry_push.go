package server

import (
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// decodeDensePush decodes a push log entry's bytes (a marshalled
// pb.PushRequest) as a backup applies it, without the garbage of
// proto.Unmarshal (a copy of every gradient per push, which the backup
// drops right after the update): each gradient's bytes are the entry's own
// where they are aligned for float32, else a copy in *scratch, which the
// next call reuses. The result is valid until then, and only as long as b
// is not modified (a log entry never is). ok is false for anything but
// worker, step and dense gradients (sparse rows, unknown fields, malformed
// bytes): the caller then decodes with proto.Unmarshal.
func decodeDensePush(b []byte, scratch *[]float32) (req *pb.PushRequest, ok bool) {
	req = &pb.PushRequest{}
	type span struct{ off, n int }
	var copies []span // gradients to copy into scratch, as offsets in floats
	need := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, false
			}
			req.Worker, b = int32(v), b[n:]
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, false
			}
			req.Step, b = int64(v), b[n:]
		case num == 3 && typ == protowire.BytesType:
			m, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			t, ok := decodeDenseTensor(m)
			if !ok {
				return nil, false
			}
			if len(t.Data)%4 == 0 && len(t.Data) > 0 && uintptr(unsafe.Pointer(&t.Data[0]))%4 != 0 {
				copies = append(copies, span{need, len(t.Data) / 4})
				need += len(t.Data) / 4
			} else {
				copies = append(copies, span{-1, 0})
			}
			req.Grads = append(req.Grads, t)
		default:
			return nil, false
		}
	}
	if need > 0 {
		if cap(*scratch) < need {
			*scratch = make([]float32, need)
		}
		s := (*scratch)[:need]
		for i, c := range copies {
			if c.off < 0 {
				continue
			}
			dst := s[c.off : c.off+c.n]
			wire.DecodeFloat32s(dst, req.Grads[i].Data)
			req.Grads[i].Data = wire.Float32Bytes(dst)
		}
	}
	return req, true
}

// decodeDenseTensor decodes a pb.DenseTensor whose Data aliases b.
func decodeDenseTensor(b []byte) (*pb.DenseTensor, bool) {
	t := &pb.DenseTensor{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || (num != 1 && num != 2) {
			return nil, false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		if num == 1 {
			t.Name = string(v)
		} else {
			t.Data = v
		}
	}
	return t, true
}
