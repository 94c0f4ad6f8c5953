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
	// ReasonBusy marks a ResourceExhausted answered to a gRPC call that
	// would take the bytes the ps's gRPC calls hold together past their
	// bound: the client tries again a few times before it fails.
	ReasonBusy = "BUSY"
)

// The ps reads no gRPC message larger than GRPCMaxMessage (its receive
// limit, checked against a message's 5-byte length prefix before any of
// it is read). A client sends a request larger than GRPCPiece in pieces
// (the *Pieces calls: the serialized request cut into messages of at most
// GRPCPiece bytes), whose first piece declares the whole size, so that
// the ps checks that size against its bounds before it reads the rest.
const (
	GRPCMaxMessage = 1 << 20
	GRPCPiece      = 512 << 10
)
