package wire

import "fmt"

// ErrorKind is what an error reply tells the worker to do about it. Kinds
// 1 to 63 are the shard's error kinds (internal/shard.Kind), under the
// same numbers: the ps puts a shard error's kind on the wire as it is, and
// the client reads it back as it was. Kinds from 64 are the data path's
// own: errors of the ps's shell, not of its shard.
type ErrorKind uint32

// The error kinds.
const (
	// KindInvalid: a malformed request (unknown variable, wrong length, a
	// value not finite). Nothing was applied; the request must be fixed.
	KindInvalid ErrorKind = 1
	// KindNotReady: the shard has no state yet (waiting for the chief's
	// Init or a restore).
	KindNotReady ErrorKind = 2
	// KindConflict: the shard holds another layout than the request's.
	KindConflict ErrorKind = 3
	// KindBehind: a synchronous push for a step the shard has not reached:
	// pull again.
	KindBehind ErrorKind = 4
	// KindFailed: a synchronous step timed out and the job fails.
	KindFailed ErrorKind = 5
	// KindRestored: the shard was restored while the request waited: pull
	// again.
	KindRestored ErrorKind = 6
	// KindCacheMiss: the request names a key set the connection does not
	// hold. Nothing was applied: send it again with its keys.
	KindCacheMiss ErrorKind = 7
	// KindInternal: the ps failed at something that is not the request's
	// fault.
	KindInternal ErrorKind = 8
	// KindUnavailable: the ps is stopping (a pull was waiting when it
	// did): wait for it to come back.
	KindUnavailable ErrorKind = 64
	// KindMalformed: the request broke the frame format; the ps closes the
	// connection after this reply.
	KindMalformed ErrorKind = 65
)

var kindNames = map[ErrorKind]string{
	KindInvalid: "invalid request", KindNotReady: "not ready", KindConflict: "layout conflict",
	KindBehind: "behind", KindFailed: "failed", KindRestored: "restored", KindCacheMiss: "key cache miss",
	KindInternal: "internal", KindUnavailable: "unavailable", KindMalformed: "malformed frame",
}

func (k ErrorKind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("ErrorKind(%d)", uint32(k))
}

// GRPCCode is the gRPC status code of kind k: what a gRPC answer of an
// error of kind k carries, and what an error reply carries instead of the
// kind on a connection of a version before DataVersionKinds (older
// workers read status codes there). Kinds a code does not tell apart
// (NotReady, Conflict and Behind: 9 FailedPrecondition; Restored and
// CacheMiss: 10 Aborted) share one; older workers told a cache miss by
// its message, which still names it.
func GRPCCode(k ErrorKind) uint32 {
	switch k {
	case KindInvalid, KindMalformed:
		return 3
	case KindNotReady, KindConflict, KindBehind:
		return 9
	case KindFailed:
		return 4
	case KindRestored, KindCacheMiss:
		return 10
	case KindUnavailable:
		return 14
	}
	return 13
}

// ErrorBody makes the frame's body an error of kind k and a message (cut
// to MaxErrorMessage bytes), for a connection of the given data path
// version: the kind itself from DataVersionKinds on, its GRPCCode
// before.
func (f *Frame) ErrorBody(k ErrorKind, version int, msg string) {
	if len(msg) > MaxErrorMessage {
		msg = msg[:MaxErrorMessage]
	}
	code := uint32(k)
	if version < DataVersionKinds {
		code = GRPCCode(k)
	}
	f.u32(int(code))
	f.meta = append(f.meta, msg...)
}

// ReadErrorBody reads the body of an error reply on a connection of the
// given data path version: its kind and message. Before DataVersionKinds
// the body carries a gRPC status code, read as the kind it stands for
// (KindOfGRPCCode). A kind this side does not know (a newer ps's) is
// returned as it is.
func ReadErrorBody(r *BodyReader, version int) (kind ErrorKind, msg string, err error) {
	c, err := r.Uint32("error kind")
	if err != nil {
		return 0, "", err
	}
	switch {
	case c == 0 && version < DataVersionKinds:
		// gRPC's OK: an error that would read as a success.
		return 0, "", frameErr("error reply with status code 0 (OK)")
	case c == 0:
		return 0, "", frameErr("error reply of kind 0")
	case version < DataVersionKinds:
		kind = KindOfGRPCCode(uint32(c))
	default:
		kind = ErrorKind(c)
	}
	b, err := r.Bytes(nil, int(r.Left), "error message")
	return kind, string(b), err
}

// KindOfGRPCCode is the kind a gRPC status code stands for, where only
// the code is known (a gRPC answer, or an error reply before
// DataVersionKinds): GRPCCode's inverse, with the kinds that share a code
// read as the one a worker acts on the same way (9 FailedPrecondition
// as NotReady, 10 Aborted as Restored), and any other code as Internal.
func KindOfGRPCCode(code uint32) ErrorKind {
	switch code {
	case 3:
		return KindInvalid
	case 4:
		return KindFailed
	case 9:
		return KindNotReady
	case 10:
		return KindRestored
	case 14:
		return KindUnavailable
	}
	return KindInternal
}
