package wire

// ErrorDomain and the reasons below name, in a gRPC status's ErrorInfo
// detail, what a status code alone does not tell apart: the client acts on
// them, not on the message's text.
const (
	ErrorDomain = "paramserv"
	// ReasonLayoutConflict marks a FailedPrecondition answered to an Init
	// whose layout differs from the one the ps holds (the shard's
	// Conflict): an input to fix, not a ps to wait for. Init is a gRPC
	// call, so the data path never carries it.
	ReasonLayoutConflict = "LAYOUT_CONFLICT"
	// ReasonVersionMismatch marks a FailedPrecondition answered to a call
	// from a worker of another wire protocol version (package version):
	// the worker stops, it does not wait.
	ReasonVersionMismatch = "VERSION_MISMATCH"
)
