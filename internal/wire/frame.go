package wire

import (
	"fmt"

	"github.com/paramserv/paramserv/internal/format"
)

// The data path: push, pull and push+pull as length-prefixed binary frames
// over a plain TCP connection, beside gRPC on the same port (the ps tells
// the two apart by the first four bytes). docs/WIRE.md is the full
// description; the constants and layouts here are the definition.

// Data path constants.
const (
	// DataMagic opens the client's preface and the server's hello. An
	// HTTP/2 connection opens with "PRI " instead.
	DataMagic = "PSDP"
	// DataVersion is the version of the frames below.
	DataVersion = 1
	// DataVersionIncremental is version 1 plus incremental pulls
	// (FlagIncremental). A client that wants them asks for it in its
	// preface; a ps that speaks it answers it, an older one refuses it and
	// the client dials again asking for DataVersion.
	DataVersionIncremental = 2
	// DataVersionDenseIncremental is version 2 plus incremental dense
	// pulls (FlagDenseIncremental, docs/WIRE.md). A ps that refuses it is
	// asked for DataVersionIncremental, then DataVersion.
	DataVersionDenseIncremental = 3
	// DataVersionKinds is version 3 whose error replies carry an
	// ErrorKind, the shard's error kinds as they are, where versions 1 to
	// 3 carry a gRPC status code (LegacyCode). A worker of this version
	// asks for it, and sends its pushes and pulls by gRPC to a ps that
	// refuses it (an older one); a ps of this version still serves
	// versions 1 to 3 to older workers, with status codes.
	DataVersionKinds = 4
	// DataVersionIncarnation is version 4 whose pushes name the ps's
	// incarnation their gradients were computed against
	// (ReqHeader.Incarnation), where earlier versions send 0 there. A
	// ps that refuses it is asked for DataVersionKinds.
	DataVersionIncarnation = 5
	// PrefaceLen is the client preface: magic, u16 version, then zeros. It
	// is as long as HTTP/2's, so that a ps that only speaks gRPC reads all
	// of it, sees a bad preface and closes the connection at once (the
	// client then uses gRPC) instead of waiting for more bytes.
	PrefaceLen = 24
	// HelloLen is the server's answer to the preface: magic, u16 version,
	// u16 status (HelloOK or HelloBadVersion), u32 cache slots, u32 most
	// keys per slot.
	HelloLen = 16
	// ReqHeaderLen and RepHeaderLen are the fixed headers of a request and
	// a reply.
	ReqHeaderLen = 40
	RepHeaderLen = 32
	// MaxBody bounds the bytes after a header (as gRPC's message limit).
	MaxBody = 1 << 30
	// MaxName bounds a variable or table name (format.MaxName, which the
	// ps checks names against at Init).
	MaxName = format.MaxName
	// MaxSections bounds the sections of each kind in one frame.
	MaxSections = 4096
	// MaxErrorMessage bounds the message of an error reply.
	MaxErrorMessage = 64 << 10
	// CacheSlots is the number of key sets a connection can keep on the
	// ps, and MaxCachedKeys the most keys one may hold.
	CacheSlots    = 8
	MaxCachedKeys = 1 << 22
	// NoSlot, as the argument of KeysInline, keeps the keys in no slot.
	NoSlot = 0xff
)

// Hello statuses.
const (
	HelloOK         = 0
	HelloBadVersion = 1
)

// Op is what a request does; the bits combine.
type Op uint8

// The ops.
const (
	OpPush     Op = 1
	OpPull     Op = 2
	OpPushPull Op = OpPush | OpPull
)

// Push reports whether o pushes.
func (o Op) Push() bool { return o&OpPush != 0 }

// Pull reports whether o pulls.
func (o Op) Pull() bool { return o&OpPull != 0 }

// KeyMode says where a sparse section's keys are.
type KeyMode uint8

// The key modes.
const (
	// KeysInline: the keys follow in the section; its argument is the
	// cache slot to keep them in for later requests, or NoSlot.
	KeysInline KeyMode = 0
	// KeysCached: the keys kept in the slot named by the argument.
	KeysCached KeyMode = 1
	// KeysAsPush: (pull sections only) the keys of the push section of
	// this request named by the argument.
	KeysAsPush KeyMode = 2
)

// Request header flags.
const (
	flagPullDense   = 1 // the pull reads every dense variable of the ps
	flagIncremental = 2 // the sparse pull sections are incremental (FlagIncremental)
	flagDenseIncr   = 4 // the dense pull is incremental (DenseIncremental, version 3)
)

// DenseBlock is the number of float32 values of a dense block, the unit of
// incremental dense pulls (format.DenseBlock, which the ps's versions use).
const DenseBlock = format.DenseBlock

// DenseBlocks is the number of blocks of a variable of n values.
func DenseBlocks(n int) int { return format.DenseBlocks(n) }

// MaxDenseBlocks bounds the blocks a request may name (MaxBody's worth of
// values).
const MaxDenseBlocks = MaxBody / 4 / DenseBlock

// DenseHeld is the dense part of an incremental dense pull (version 3):
// the ps incarnation and the version at which the worker holds every
// dense block of the ps (Since 0: none held), and the number of blocks
// it counts, which must be the ps's.
type DenseHeld struct {
	Incarnation, Since uint64
	Blocks             int
}

// Reply header flags.
const (
	flagError   = 1 // the body is an error kind (or status code) and a message
	flagDropped = 2 // the push was dropped (stale or duplicate)
)

// FrameError is a malformed frame: the peer does not speak the protocol,
// and the connection cannot go on.
type FrameError struct{ Msg string }

func (e *FrameError) Error() string { return "data path: malformed frame: " + e.Msg }

func frameErr(format string, args ...any) error {
	return &FrameError{Msg: fmt.Sprintf(format, args...)}
}
