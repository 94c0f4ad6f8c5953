package checkpoint

import (
	"errors"
	"fmt"

	"github.com/paramserv/paramserv/internal/ckptformat"
)

// Errors. Use errors.Is: the errors this package returns wrap one of these
// (and, where the cause was an I/O failure, the I/O error too).
var (
	// ErrInvalid: the caller passed something that cannot be written (a
	// tensor whose data does not match its shape, a manifest that names a
	// shard it does not list, ...).
	ErrInvalid = errors.New("checkpoint: invalid argument")
	// ErrFormat: a file is not a well-formed shard or manifest.
	ErrFormat = ckptformat.ErrFormat
	// ErrVersion: a manifest was written by a newer format version.
	ErrVersion = errors.New("checkpoint: unsupported format version")
	// ErrSize: a shard file's size differs from what the manifest records
	// (typically a truncated copy).
	ErrSize = errors.New("checkpoint: size mismatch")
	// ErrChecksum: a shard file's SHA-256 differs from the manifest's.
	ErrChecksum = errors.New("checkpoint: checksum mismatch")
	// ErrMismatch: a shard file is intact but disagrees with the manifest
	// about its tensors, index or step.
	ErrMismatch = errors.New("checkpoint: shard does not match manifest")
	// ErrIncomplete: a checkpoint directory has no manifest (a save that
	// was interrupted, or one still being written).
	ErrIncomplete = errors.New("checkpoint: incomplete")
	// ErrExists: the checkpoint for this step is already complete.
	ErrExists = errors.New("checkpoint: already complete")
	// ErrNotFound: no valid checkpoint (or not the one asked for).
	ErrNotFound = errors.New("checkpoint: no valid checkpoint")
	// ErrNoTensor: a shard has no tensor of the name asked for.
	ErrNoTensor = ckptformat.ErrNoTensor
	// ErrChain: a delta checkpoint whose chain of parents back to its
	// base is broken (a parent missing, incomplete or damaged), so it
	// cannot be restored although its own files are intact.
	ErrChain = errors.New("checkpoint: broken chain")
	// ErrDType: a tensor was read as a type it does not have.
	ErrDType = ckptformat.ErrDType
)

// reason is an error that says only what happened to a file ("shard-1-of-2:
// checksum mismatch: ...") while errors.Is still finds its kind; it keeps the
// reports that Latest and List produce free of repeated package prefixes.
type reason struct {
	kind error
	err  error // the message, possibly wrapping a cause with %w
}

func (r *reason) Error() string        { return r.err.Error() }
func (r *reason) Unwrap() error        { return r.err }
func (r *reason) Is(target error) bool { return target == r.kind }

// errorf returns a reason of the given kind; format may use %w.
func errorf(kind error, format string, args ...any) error {
	return &reason{kind: kind, err: fmt.Errorf(format, args...)}
}
