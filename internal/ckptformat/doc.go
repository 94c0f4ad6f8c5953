// Package ckptformat holds the types of a checkpoint's contents that the
// ps's state machine (package shard) builds and reads: a shard's tensors
// (Tensor, Shard, their names), where each variable and table lives
// (VariableInfo, TableInfo), and the training record (Training,
// TableSpec). It is a leaf: plain data and the conversions of tensors to
// and from their little-endian bytes, no files. Package checkpoint, the
// edge that writes and reads the files (safetensors shards, manifests,
// delta chains), names these types as its own (checkpoint.Shard is a
// ckptformat.Shard), so shard builds a checkpoint's shard without
// importing checkpoint.
package ckptformat
