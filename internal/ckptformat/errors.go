package ckptformat

import "errors"

// Errors, which package checkpoint's errors of the same names are. Use
// errors.Is.
var (
	// ErrFormat: a file is not a well-formed shard or manifest, or a
	// tensor's data is not a whole number of its elements.
	ErrFormat = errors.New("checkpoint: malformed file")
	// ErrNoTensor: a shard has no tensor of the name asked for.
	ErrNoTensor = errors.New("checkpoint: no such tensor")
	// ErrDType: a tensor was read as a type it does not have.
	ErrDType = errors.New("checkpoint: wrong dtype")
)
