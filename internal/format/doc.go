// Package format holds the shapes of the bytes a ps's state goes out in
// that the deterministic core producing them (package shard) and the edges
// moving them (wire, checkpoint) share, with no I/O of its own: the dense
// block of incremental pulls and the check that gradient values are finite.
// It imports nothing of the project, so that shard needs neither wire nor
// checkpoint.
package format
