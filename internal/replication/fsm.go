package replication

import "google.golang.org/protobuf/proto"

// FSM is the state one copy of a replicated shard holds, as the shard's log
// drives it (after hashicorp/raft's FSM; server.FSM implements it). The
// log's entries are opaque bytes here: the FSM's owner encodes them (for
// a shard, server.EncodeEntry and its kin) and the FSM decodes them.
//
// Concurrency: Apply is called by one goroutine at a time, in log order
// (the copy's applier, off the host's lock); Snapshot and Restore are
// called only once every entry handed out before is applied, and never
// while Apply runs.
type FSM interface {
	// Apply applies log entry seq, whose bytes are data, and returns its
	// result, which goes to the call that proposed it if that call waits
	// on this ps. own is that call's request, nil if it is not this ps's:
	// the FSM may apply it instead of decoding data.
	Apply(seq uint64, data []byte, own proto.Message) (proto.Message, error)
	// Snapshot is the copy whole, as it stands after the entries applied,
	// for a ps that rejoins.
	Snapshot() ([]byte, error)
	// Restore replaces the copy by another ps's Snapshot.
	Restore(snapshot []byte) error
}
