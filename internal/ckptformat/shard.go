package ckptformat

import "fmt"

// Shard is what one parameter server saves: its part of the model as a flat
// list of tensors, with the names following the conventions below, and
// free-form string metadata.
//
// Naming conventions (see VariableInfo and TableInfo):
//
//	dense variable             "<var>"               its values, any shape
//	optimizer state of it      "<var>/<slot>"        same shape, e.g. "hid_w/adam_m"
//	sparse table keys          "<table>/keys"        U64 [n]
//	sparse table values        "<table>/values"      F32 [n, dim]
//	per-row state              "<table>/<slot>"      [n, dim] F32 (e.g. "emb/adagrad")
//	                                                 or [n] I64 (e.g. "emb/updates")
//
// A Shard is plain data; nothing in it is shared or locked.
type Shard struct {
	// Step is the training step the shard's state reflects: its cut. In
	// sync mode every shard has the checkpoint's step; in async mode the
	// shards may cut at different steps.
	Step int64
	// Tensors in any order; the file holds them in file order (widest
	// dtype first, then by name) and ReadShard returns them so.
	Tensors []Tensor
	// Meta is saved in the file's __metadata__. Keys beginning with
	// "paramserv." are reserved.
	Meta map[string]string

	// Delta marks a shard of an incremental checkpoint: it holds only what
	// changed since the same shard of the checkpoint at Parent. A dense
	// variable that changed is there whole (values and slots), one that
	// did not is absent; a sparse table has the rows created or changed
	// (keys, values, per-row state, as in a full shard) and the tensor
	// DeletedName(table), U64 [m], of the keys dropped (evicted) since.
	// Meta is whole. ReadShard applies a chain of them to its base and
	// returns a shard with Delta false.
	Delta  bool
	Parent int64

	// AnyOrder: each sparse table's keys are distinct but in no
	// particular order (a ps writes its table in the order its memory
	// holds the rows, with no sort); else they strictly ascend. A delta
	// shard's keys always ascend. A reader that needs keys in order sorts
	// them.
	AnyOrder bool

	// Indexed: some sparse tables (AnyOrder) have their index beside their
	// rows, as IndexName(table), U64 [slots/2]: the table's uint32 index
	// slots, two to an element, little-endian, valid for the rows in the
	// file's order; and the mask of a slot's row bits as the metadata
	// IndexMaskMeta(table), in decimal. A restore onto the same number of
	// ps takes the index instead of hashing every key (sparse.SavedIndex).
	Indexed bool

	// verify, set by checkpoint.ReadShardOverlapped (SetVerify), waits
	// for the file's checksum.
	verify func() error
	// keep, set by checkpoint's mapped readers (SetKeep), holds the
	// mapping the tensors are in.
	keep func(held ...[]byte) (release func())
}

// SetKeep says that the shard's tensors lie in memory that keep can hold
// past the reader's release: a file mapped private and writable
// (checkpoint.ReadShardOverlapped sets it).
func (s *Shard) SetKeep(keep func(held ...[]byte) (release func())) { s.keep = keep }

// Keep returns, for a shard whose tensors lie in a private, writable
// mapping of its file, a function that holds the mapping: each call
// names the memory (tensors' data, or parts of it) its caller goes on
// using and returns a release, and the mapping stays until the reader's
// release and every such release have been called. The reader's release
// gives back the rest of the mapping's pages where one is held. A holder
// may write into the memory it named (copy-on-write: the file does not
// change). ok is false for any other shard.
func (s *Shard) Keep() (keep func(held ...[]byte) (release func()), ok bool) {
	return s.keep, s.keep != nil
}

// Verified waits until the file the shard was read from has been checked
// and returns the result: nil, or why the file is damaged. A shard from
// ReadShardOverlapped is not to be trusted (nor anything built from it
// kept) before Verified returns nil; every other shard was checked before
// it was returned, and Verified returns nil at once.
func (s *Shard) Verified() error {
	if s.verify == nil {
		return nil
	}
	return s.verify()
}

// SetVerify makes Verified wait for verify: the reader of a file whose
// checksum is still being checked sets it (checkpoint.ReadShardOverlapped).
func (s *Shard) SetVerify(verify func() error) { s.verify = verify }

// Lookup returns the tensor called name, or an error wrapping ErrNoTensor.
// It scans the list; for many lookups build a map with ByName.
func (s Shard) Lookup(name string) (Tensor, error) {
	for _, t := range s.Tensors {
		if t.Name == name {
			return t, nil
		}
	}
	return Tensor{}, fmt.Errorf("%w: %q", ErrNoTensor, name)
}

// ByName indexes the tensors by name.
func (s Shard) ByName() map[string]Tensor {
	m := make(map[string]Tensor, len(s.Tensors))
	for _, t := range s.Tensors {
		m[t.Name] = t
	}
	return m
}

// Float32s returns the elements of the F32 tensor called name.
func (s Shard) Float32s(name string) ([]float32, error) {
	t, err := s.Lookup(name)
	if err != nil {
		return nil, err
	}
	return t.Float32s()
}

// Int64s returns the elements of the I64 tensor called name.
func (s Shard) Int64s(name string) ([]int64, error) {
	t, err := s.Lookup(name)
	if err != nil {
		return nil, err
	}
	return t.Int64s()
}

// Uint64s returns the elements of the U64 tensor called name.
func (s Shard) Uint64s(name string) ([]uint64, error) {
	t, err := s.Lookup(name)
	if err != nil {
		return nil, err
	}
	return t.Uint64s()
}

// SlotName is the tensor name of a variable's or table's state slot:
// SlotName("hid_w", "adam_m") is "hid_w/adam_m".
func SlotName(base, slot string) string { return base + "/" + slot }

// KeysName is the tensor name of a sparse table's keys.
func KeysName(table string) string { return SlotName(table, "keys") }

// DeletedName is the tensor name of the keys a delta shard drops from a
// sparse table.
func DeletedName(table string) string { return SlotName(table, "deleted") }

// ValuesName is the tensor name of a sparse table's values.
func ValuesName(table string) string { return SlotName(table, "values") }

// IndexName is the tensor name of a sparse table's saved index (see
// Shard.Indexed).
func IndexName(table string) string { return SlotName(table, "index") }

// IndexMaskMeta is the metadata key of the row mask of a sparse table's
// saved index (see Shard.Indexed).
func IndexMaskMeta(table string) string { return "index_row_mask/" + table }
