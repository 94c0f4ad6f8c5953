package shard

import (
	"errors"
	"fmt"
)

// Kind says what a caller can do about an error of this package.
type Kind int

const (
	// Invalid: a malformed request (unknown variable, wrong length, a
	// value not finite, a shape that overflows). Nothing was applied; the
	// shard serves on. The sender must fix its request.
	Invalid Kind = iota + 1
	// NotReady: the shard has no state yet (waiting for the chief's Init
	// or a restore).
	NotReady
	// Conflict: the shard holds another layout than the request's.
	Conflict
	// Behind: a synchronous push for a step the shard has not reached (it
	// was rolled back, or another shard ran ahead): pull again.
	Behind
	// Failed: a synchronous step timed out and the job fails.
	Failed
	// Restored: the shard was restored while the request waited: pull
	// again.
	Restored
	// CacheMiss: the request names a data-path key set the connection does
	// not hold; send the keys again.
	CacheMiss
	// Internal: the ps failed at something that is not the request's fault
	// (writing a checkpoint file, say).
	Internal
)

var kindNames = [...]string{Invalid: "invalid request", NotReady: "not ready", Conflict: "layout conflict", Behind: "behind", Failed: "failed", Restored: "restored", CacheMiss: "key cache miss", Internal: "internal"}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Error is an error of a shard, of one Kind. Msg is the whole message a
// person reads; Err, if set, is the cause (for errors.Is).
type Error struct {
	Kind Kind
	Msg  string
	Err  error
	// Flag is the training flag a Conflict is about ("--optimizer"), if
	// it is about one: the caller's input differs from the shard's.
	Flag string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, &Error{Kind: k}) match any error of kind k.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Err == nil && t.Kind == e.Kind
}

func errorf(k Kind, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Kind: k, Msg: err.Error(), Err: errors.Unwrap(err)}
}

// KindOf returns the Kind of err, or 0 if it is not a shard error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// ErrNotInitialized is the cause of a NotReady error.
var ErrNotInitialized = errors.New("not initialised yet: waiting for the chief (worker 0) to call Init")

// ErrNonFinite is the cause of the Invalid error of a push whose update
// would make a value or its optimizer state infinite or NaN: it was
// refused whole and nothing changed.
var ErrNonFinite = errors.New("update result not finite")

// ErrCacheMiss is the cause of a CacheMiss error; the message carries its
// text, which clients look for.
var ErrCacheMiss = errors.New("key cache miss")
