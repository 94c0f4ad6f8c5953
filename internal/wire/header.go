package wire

import (
	"encoding/binary"
)

// ReqHeader is the fixed header of a request:
//
//	0  u8  op                  16 i64 step (push: computed at)
//	1  u8  flags (1: pull dense) 24 i64 min_step (pull)
//	2  u16 dense push sections 32 u64 body bytes
//	4  u16 sparse push sections
//	6  u16 sparse pull sections
//	8  i32 worker
//	12 u32 incarnation (push; 0 in a pull)
type ReqHeader struct {
	Op        Op
	PullDense bool
	// Incremental: every sparse pull section names the version of the rows
	// the worker holds, and the reply carries only the rows it needs
	// (docs/WIRE.md, incremental pulls). Needs DataVersionIncremental.
	Incremental bool
	// DenseIncremental: the pull of dense values names the version of the
	// blocks the worker holds (Request.DenseHeld), and the reply carries
	// only those changed since. Needs PullDense and
	// DataVersionDenseIncremental.
	DenseIncremental              bool
	Dense, SparsePush, SparsePull int
	Worker                        int32
	Step, MinStep                 int64
	Body                          int64
	// Incarnation is, in a push, the low 32 bits of the ps's incarnation
	// the gradients were computed against (0: not known): a replicated
	// copy refuses a push of another one (docs/WIRE.md). Needs
	// DataVersionIncarnation.
	Incarnation uint32
}

// Put writes h into b (ReqHeaderLen bytes).
func (h ReqHeader) Put(b []byte) {
	b = b[:ReqHeaderLen]
	b[0] = byte(h.Op)
	b[1] = 0
	if h.PullDense {
		b[1] = flagPullDense
	}
	if h.Incremental {
		b[1] |= flagIncremental
	}
	if h.DenseIncremental {
		b[1] |= flagDenseIncr
	}
	binary.LittleEndian.PutUint16(b[2:], uint16(h.Dense))
	binary.LittleEndian.PutUint16(b[4:], uint16(h.SparsePush))
	binary.LittleEndian.PutUint16(b[6:], uint16(h.SparsePull))
	binary.LittleEndian.PutUint32(b[8:], uint32(h.Worker))
	binary.LittleEndian.PutUint32(b[12:], h.Incarnation)
	binary.LittleEndian.PutUint64(b[16:], uint64(h.Step))
	binary.LittleEndian.PutUint64(b[24:], uint64(h.MinStep))
	binary.LittleEndian.PutUint64(b[32:], uint64(h.Body))
}

// ParseReqHeader reads and checks a request header.
func ParseReqHeader(b []byte) (ReqHeader, error) {
	b = b[:ReqHeaderLen]
	h := ReqHeader{
		Op:               Op(b[0]),
		PullDense:        b[1]&flagPullDense != 0,
		Incremental:      b[1]&flagIncremental != 0,
		DenseIncremental: b[1]&flagDenseIncr != 0,
		Dense:            int(binary.LittleEndian.Uint16(b[2:])),
		SparsePush:       int(binary.LittleEndian.Uint16(b[4:])),
		SparsePull:       int(binary.LittleEndian.Uint16(b[6:])),
		Worker:           int32(binary.LittleEndian.Uint32(b[8:])),
		Step:             int64(binary.LittleEndian.Uint64(b[16:])),
		MinStep:          int64(binary.LittleEndian.Uint64(b[24:])),
		Incarnation:      binary.LittleEndian.Uint32(b[12:]),
	}
	body := binary.LittleEndian.Uint64(b[32:])
	switch {
	case h.Op != OpPush && h.Op != OpPull && h.Op != OpPushPull:
		return h, frameErr("unknown op %d (want 1 push, 2 pull, 3 push+pull)", b[0])
	case b[1]&^(flagPullDense|flagIncremental|flagDenseIncr) != 0:
		return h, frameErr("unknown flags %#x", b[1])
	case h.Dense > MaxSections || h.SparsePush > MaxSections || h.SparsePull > MaxSections:
		return h, frameErr("%d dense, %d sparse push and %d sparse pull sections: at most %d of each", h.Dense, h.SparsePush, h.SparsePull, MaxSections)
	case !h.Op.Push() && (h.Dense > 0 || h.SparsePush > 0):
		return h, frameErr("a pull carries %d dense and %d sparse push sections", h.Dense, h.SparsePush)
	case !h.Op.Push() && h.Incarnation != 0:
		return h, frameErr("a pull names the incarnation of a push")
	case !h.Op.Pull() && (h.PullDense || h.SparsePull > 0 || h.Incremental):
		return h, frameErr("a push asks to pull")
	case h.DenseIncremental && !h.PullDense:
		return h, frameErr("an incremental dense pull that pulls no dense values")
	case body > MaxBody:
		return h, frameErr("body of %d bytes is over the limit of %d", body, MaxBody)
	}
	h.Body = int64(body)
	return h, nil
}

// RepHeader is the fixed header of a reply:
//
//	0 u8  status (0 ok, 1 error)  8  i64 global step
//	1 u8  flags (1: push dropped) 16 u64 body bytes
//	2 u16 dense sections          24 u64 the ps's incarnation (0 in an error reply)
//	4 u16 sparse sections
//	6 u16 reserved, 0
type RepHeader struct {
	Err, Dropped  bool
	Dense, Sparse int
	Step          int64
	Body          int64
	// Incarnation changes when the ps restarts or restores a checkpoint.
	Incarnation uint64
}

// Put writes h into b (RepHeaderLen bytes).
func (h RepHeader) Put(b []byte) {
	b = b[:RepHeaderLen]
	b[0], b[1] = 0, 0
	if h.Err {
		b[0] = 1
	}
	if h.Dropped {
		b[1] = flagDropped
	}
	binary.LittleEndian.PutUint16(b[2:], uint16(h.Dense))
	binary.LittleEndian.PutUint16(b[4:], uint16(h.Sparse))
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint64(b[8:], uint64(h.Step))
	binary.LittleEndian.PutUint64(b[16:], uint64(h.Body))
	binary.LittleEndian.PutUint64(b[24:], h.Incarnation)
}

// ParseRepHeader reads and checks a reply header.
func ParseRepHeader(b []byte) (RepHeader, error) {
	b = b[:RepHeaderLen]
	h := RepHeader{
		Err:         b[0] == 1,
		Dropped:     b[1]&flagDropped != 0,
		Dense:       int(binary.LittleEndian.Uint16(b[2:])),
		Sparse:      int(binary.LittleEndian.Uint16(b[4:])),
		Step:        int64(binary.LittleEndian.Uint64(b[8:])),
		Incarnation: binary.LittleEndian.Uint64(b[24:]),
	}
	body := binary.LittleEndian.Uint64(b[16:])
	switch {
	case b[0] > 1 || b[1]&^flagDropped != 0 || binary.LittleEndian.Uint16(b[6:]) != 0:
		return h, frameErr("reply status %d, flags %#x: unknown", b[0], b[1])
	case h.Dense > MaxSections || h.Sparse > MaxSections:
		return h, frameErr("reply of %d dense and %d sparse sections: at most %d of each", h.Dense, h.Sparse, MaxSections)
	case body > MaxBody:
		return h, frameErr("reply body of %d bytes is over the limit of %d", body, MaxBody)
	case h.Err && (body < 4 || body > 4+MaxErrorMessage):
		return h, frameErr("error reply of %d bytes (want 4 to %d)", body, 4+MaxErrorMessage)
	}
	h.Body = int64(body)
	return h, nil
}
