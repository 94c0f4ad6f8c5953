package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// The log entries of a replicated shard (docs/REPLICATION.md): a kind byte,
// then the kind's bytes. The replication shell ships them as they are; FSM
// applies them. Their bytes travel between ps: the format does not change.
//
//   - entryInit, entryPush, entryDone, entryRestore, entryChangeRate: the
//     request, marshalled (EncodeEntry).
//   - entryAggregate: a synchronous step's aggregate (EncodeAggregate):
//     step i64, the number of variables u32, then each variable's values
//     (u32 count, float32 values), in the shard's layout order; then, for
//     a shard with sparse tables, their rows (encodeRows).
//   - entryTouch: a pull's keys (EncodeTouch): per table, u32 name length,
//     the name, u32 key count, the keys (u64 each).
//   - entryHeard: the workers a primary has heard from (EncodeHeard): u32
//     the ps that logged it, then per worker u32 worker and i64
//     milliseconds since it was last heard from.
const (
	entryInit byte = iota + 1
	entryPush
	entryDone
	entryAggregate
	entryTouch
	entryRestore
	entryChangeRate
	entryHeard
)

// EncodeEntry is the log entry of an Init, Push, Done, Restore or
// ChangeRate request:
// its kind, then the request marshalled after it (one copy of its bytes).
func EncodeEntry(req proto.Message) ([]byte, error) {
	var kind byte
	switch req.(type) {
	case *pb.InitRequest:
		kind = entryInit
	case *pb.PushRequest:
		kind = entryPush
	case *pb.DoneRequest:
		kind = entryDone
	case *pb.RestoreRequest:
		kind = entryRestore
	case *pb.ChangeRateRequest:
		kind = entryChangeRate
	default:
		return nil, fmt.Errorf("a %T is not logged", req)
	}
	b := make([]byte, 1, 1+proto.Size(req))
	b[0] = kind
	return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, req)
}

// EncodeAggregate is the log entry of a synchronous step's aggregate, as
// Config.Aggregated hands it out.
func EncodeAggregate(step int64, grads [][]float32, rows []shard.RowGrads) []byte {
	n := 1 + 8 + 4
	for _, g := range grads {
		n += 4 + 4*len(g)
	}
	if len(rows) > 0 {
		n += rowsSize(rows)
	}
	b := make([]byte, 0, n)
	b = append(b, entryAggregate)
	b = binary.LittleEndian.AppendUint64(b, uint64(step))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(grads)))
	for _, g := range grads {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(g)))
		b = append(b, wire.Float32Bytes(g)...)
	}
	if len(rows) > 0 {
		b = encodeRows(b, rows)
	}
	return b
}

// decodeAggregate reads an aggregate entry's bytes (after the kind).
func decodeAggregate(data []byte) (step int64, grads [][]float32, rows []shard.RowGrads, err error) {
	bad := func(what string) error { return fmt.Errorf("malformed aggregate entry: %s", what) }
	if len(data) < 12 {
		return 0, nil, nil, bad("short header")
	}
	step = int64(binary.LittleEndian.Uint64(data))
	nv := int(binary.LittleEndian.Uint32(data[8:]))
	data = data[12:]
	if nv > len(data)/4 {
		return 0, nil, nil, bad("too many variables")
	}
	grads = make([][]float32, nv)
	for i := range grads {
		if len(data) < 4 {
			return 0, nil, nil, bad("short variable header")
		}
		k := int(binary.LittleEndian.Uint32(data))
		data = data[4:]
		if k > len(data)/4 {
			return 0, nil, nil, bad("short values")
		}
		g := make([]float32, k) // aligned, whatever the entry's offset
		copy(wire.Float32Bytes(g), data[:4*k])
		grads[i] = g
		data = data[4*k:]
	}
	if len(data) != 0 { // the tables' rows
		if rows, err = decodeRows(data); err != nil {
			return 0, nil, nil, err
		}
	}
	return step, grads, rows, nil
}

// EncodeTouch is the log entry of a pull's keys, whose reading changes a
// table (Replicated.ReplicatedPulled).
func EncodeTouch(rows []PulledRows) []byte {
	n := 1
	for _, r := range rows {
		n += 8 + len(r.Table) + 8*len(r.Keys)
	}
	b := make([]byte, 1, n)
	b[0] = entryTouch
	for _, r := range rows {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Table)))
		b = append(b, r.Table...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Keys)))
		b = append(b, wire.Uint64Bytes(r.Keys)...)
	}
	return b
}

// decodeTouch reads a touch entry's bytes (after the kind).
func decodeTouch(data []byte) ([]PulledRows, error) {
	var rows []PulledRows
	for len(data) > 0 {
		if len(data) < 4 {
			return nil, errors.New("malformed pull entry: short table header")
		}
		nl := int(binary.LittleEndian.Uint32(data))
		data = data[4:]
		if nl > len(data) || len(data)-nl < 4 {
			return nil, errors.New("malformed pull entry: short table name")
		}
		name := data[:nl]
		nk := int(binary.LittleEndian.Uint32(data[nl:]))
		data = data[nl+4:]
		if nk > len(data)/8 {
			return nil, fmt.Errorf("malformed pull entry: %d keys in %d bytes", nk, len(data))
		}
		keys := make([]uint64, nk) // aligned, whatever the entry's offset
		copy(wire.Uint64Bytes(keys), data[:8*nk])
		data = data[8*nk:]
		rows = append(rows, PulledRows{Table: name, Keys: keys})
	}
	return rows, nil
}

// encodeRows appends the tables' part of an aggregate entry: u32 table
// count, then per table u32 key count, the keys (u64), and the values
// (u32 count, float32 values).
func encodeRows(b []byte, rows []shard.RowGrads) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rows)))
	for _, r := range rows {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Keys)))
		b = append(b, wire.Uint64Bytes(r.Keys)...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Values)))
		b = append(b, wire.Float32Bytes(r.Values)...)
	}
	return b
}

func rowsSize(rows []shard.RowGrads) int {
	n := 4
	for _, r := range rows {
		n += 8 + 8*len(r.Keys) + 4*len(r.Values)
	}
	return n
}

// decodeRows reads what encodeRows wrote.
func decodeRows(data []byte) ([]shard.RowGrads, error) {
	bad := errors.New("malformed aggregate entry: tables")
	if len(data) < 4 {
		return nil, bad
	}
	nt := int(binary.LittleEndian.Uint32(data))
	data = data[4:]
	if nt > len(data)/8 {
		return nil, bad
	}
	rows := make([]shard.RowGrads, nt)
	for i := range rows {
		if len(data) < 4 {
			return nil, bad
		}
		nk := int(binary.LittleEndian.Uint32(data))
		data = data[4:]
		if nk > len(data)/8 {
			return nil, bad
		}
		rows[i].Keys = make([]uint64, nk)
		copy(wire.Uint64Bytes(rows[i].Keys), data[:8*nk])
		data = data[8*nk:]
		if len(data) < 4 {
			return nil, bad
		}
		nv := int(binary.LittleEndian.Uint32(data))
		data = data[4:]
		if nv > len(data)/4 {
			return nil, bad
		}
		rows[i].Values = make([]float32, nv)
		copy(wire.Float32Bytes(rows[i].Values), data[:4*nv])
		data = data[4*nv:]
	}
	if len(data) != 0 {
		return nil, errors.New("malformed aggregate entry: trailing bytes")
	}
	return rows, nil
}

// EncodeHeard is the log entry by which ps, the primary of a shard, tells
// its copies when it last heard from each worker (ago, by worker): a
// backup hears a worker's pulls and Status calls, and a synchronous
// worker's pushes, only through it (Server.HeardOf).
func EncodeHeard(ps int, ago map[int]time.Duration) []byte {
	b := make([]byte, 1, 1+4+12*len(ago))
	b[0] = entryHeard
	b = binary.LittleEndian.AppendUint32(b, uint32(ps))
	for w, d := range ago {
		b = binary.LittleEndian.AppendUint32(b, uint32(w))
		b = binary.LittleEndian.AppendUint64(b, uint64(d.Milliseconds()))
	}
	return b
}

// decodeHeard reads a heard entry's bytes (after the kind).
func decodeHeard(data []byte) (ps int, ago map[int]time.Duration, err error) {
	if len(data) < 4 || (len(data)-4)%12 != 0 {
		return 0, nil, fmt.Errorf("malformed heard entry of %d bytes", len(data))
	}
	ps = int(binary.LittleEndian.Uint32(data))
	ago = make(map[int]time.Duration, (len(data)-4)/12)
	for data = data[4:]; len(data) > 0; data = data[12:] {
		ms := int64(binary.LittleEndian.Uint64(data[4:]))
		if ms < 0 {
			return 0, nil, fmt.Errorf("malformed heard entry: %d ms ago", ms)
		}
		ago[int(binary.LittleEndian.Uint32(data))] = time.Duration(ms) * time.Millisecond
	}
	return ps, ago, nil
}
