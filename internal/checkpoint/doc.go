// Package checkpoint writes and reads the parameter servers' checkpoints:
// one safetensors file per server ("shard") and a JSON manifest that ties
// them together. It does its I/O through vfs.FS, so its crash safety is
// tested against vfs.Mem's simulated crashes and injected disk errors.
//
// # Layout
//
//	<dir>/ckpt-<step>/shard-<k>-of-<n>.safetensors   one per parameter server
//	<dir>/ckpt-<step>/manifest.json                  written last, by the chief
//
// step is the checkpoint's global step in decimal, without padding; the
// readers order checkpoints by its numeric value. A checkpoint exists only
// once its manifest does: a directory without one is an interrupted (or
// running) save, which readers skip and Prune eventually deletes. Files
// being written carry a ".tmp" suffix until they are renamed into place.
//
// # Shard files
//
// A shard is a standard safetensors file, readable by any safetensors
// reader (safetensors.numpy.load_file, safe_open, ...):
//
//	8 bytes        N, the header length, little-endian uint64
//	N bytes        JSON header, padded with spaces to a multiple of 8:
//	               {"__metadata__":{"k":"v",...},
//	                "<name>":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},...}
//	the rest       the tensors' data, little-endian, packed without gaps;
//	               data_offsets are relative to the start of this section
//
// The dtypes used are F32, I64 and U64. The writer lays tensors out as the
// reference implementation does, widest dtype first and then by name, so
// every tensor is aligned to its element size and a shard's bytes depend
// only on its content. The metadata holds the caller's Shard.Meta and four
// reserved keys, "paramserv.format_version", "paramserv.step" (the shard's
// cut step), "paramserv.shard" (k) and "paramserv.num_shards" (n), so that a
// file describes itself.
//
// Tensor names follow conventions that the manifest's VariableInfo and
// TableInfo rely on: a dense variable "w" is the tensor "w" with its
// optimizer state as "w/<slot>" ("w/adam_m"); a sparse table "emb" is
// "emb/keys" (U64 [n]), "emb/values" (F32 [n, dim]) and per-row state
// "emb/<slot>" (F32 [n, dim], or I64 [n] for counters like "emb/updates").
//
// # Manifest
//
// manifest.json (see Manifest) records the format version, the global
// step, the time, the consistency mode, the cluster shape, the optimizer's
// name and hyper-parameters, and for each shard its file name, size,
// checksum, cut step (in async mode the servers may cut at different steps)
// and tensor list; and where each variable and table lives.
//
// The checksum (see ChecksumCRC32C4M) is a CRC-32C of each 4 MiB piece of
// the file, the pieces' CRCs tied together by one SHA-256: it finds the
// same damage a SHA-256 of the whole file did at a tenth of the CPU, so
// writing and reading a shard run at the disk's speed. Checkpoints written
// with it are format version 3 (ChecksumFormatVersion), full or delta;
// programs from before it refuse them with "format_version 3 is newer than
// this program reads". Checkpoints of versions 1 and 2 record a SHA-256 of
// the whole file (ShardInfo.SHA256) and are read and verified as before.
//
// # Writing
//
// Each parameter server calls WriteShard for its own shard; the chief
// gathers their ShardInfos and calls WriteManifest. Every file is written
// the same way, as in hashicorp/raft's file snapshot store: to a temporary
// name, fsync, close, rename to the final name, fsync the directory. So
// after a crash at any point the directory holds either the previous state
// or a checkpoint with every byte durable, never a manifest that points at
// missing or partial data. Call Prune after a successful save to keep the
// newest few.
//
// A shard of tensors made by Fill (a ps's streamed cut) is made in 4 MiB
// pieces on every core while the pieces before are written; on a Linux
// filesystem that takes O_DIRECT the pieces go from their buffers to the
// disk with no copy into the page cache (the last partial block, and
// everything on a filesystem that refuses it, through the cache). The
// file's bytes are the same either way.
//
// # Reading
//
// Latest finds the newest checkpoint that is intact: manifest parses and
// is consistent, every shard file has its recorded size and checksum, a
// valid header that agrees with the manifest, and each sparse table's keys
// in strictly ascending order where the shard says they are (not
// ShardInfo.AnyOrder; see Key order). It reports each newer
// checkpoint it skipped with the reason ("ckpt-500 damaged:
// shard-1-of-2.safetensors: checksum mismatch: ..."), so a restart can log
// why it fell back. A restoring server calls LatestSetAside instead, which
// also sets each damaged checkpoint aside (renames ckpt-<step> to
// ckpt-<step>.set-aside-<time> with a REASON file inside), so the job can
// save again at that step; set-aside directories are kept for a person to
// look at and are neither read nor pruned. ReadShard then reads one shard, verifying the checksum
// again as it goes; Shard.Lookup and friends fetch tensors by name. A
// restore, which reads each tensor once, calls ReadShardMapped instead: a
// full shard's file is mapped into memory rather than copied into a new
// buffer (its checksum pieces verified on every core), and released by the
// caller when done. The server's restore calls ReadShardOverlapped, which
// returns once the header is read and checks the file in the background
// while the caller builds its state from the mapping; the caller keeps
// nothing until Shard.Verified returns nil (shard.Restore waits for it).
// The mapping is private and writable: a caller may hold it past its
// release (Shard.Keep) and write into it copy-on-write, as a restored
// sparse table does with its keys and index; the file never changes.
// Readers never panic on bad input and, but for ReadShardOverlapped before
// Verified, never return data that failed a check: headers are bounded (MaxHeaderSize, and never more than the file
// holds) and fuzzed (FuzzReadHeader).
//
// List and Inspect produce the reports of `paramserv ckpt ls` and
// `paramserv ckpt inspect`.
//
// # Key order
//
// A ps writes each sparse table in the order its memory holds the rows
// (Shard.AnyOrder), so that a save streams with no sort: the shard's
// ShardInfo.AnyOrder and the file's metadata "paramserv.key_order": "any"
// say so, and the checkpoint is format version 4 (AnyOrderFormatVersion),
// which older programs refuse. Its keys are distinct, in no order; a
// restore finds a key that repeats as it builds the table's index. Shards
// of earlier versions, and delta shards, hold their keys strictly
// ascending. A delta applied to a base in any order keeps the base's rows
// in its order and adds its new keys after; InKeyOrder sorts a shard's
// tables by key for a reader that needs it.
//
// A shard in any order may also hold a table's hash index, as the ps's
// memory held it at the cut, beside the rows (Shard.Indexed,
// ShardInfo.Indexed, the tensor "<table>/index" and the metadata
// "index_row_mask/<table>"): format version 5 (IndexFormatVersion). A
// restore onto as many ps takes it instead of building the index; every
// other reader ignores it, and ApplyDelta and InKeyOrder, whose rows are
// in another order, drop it.
//
// # Incremental checkpoints
//
// A delta checkpoint (Manifest.Kind "delta", format version 2 or 3) holds in
// some or all of its shards (ShardInfo.Delta) only what changed since the
// checkpoint at Manifest.Parent: the dense variables that changed, whole;
// for each sparse table the rows created or changed, in the tensors a full
// shard has, and "<table>/deleted" (U64 [m]), the keys dropped. A chain
// starts at a full checkpoint (Manifest.Base). ReadShard follows a shard's
// chain and applies it (ApplyDelta: deletions first, then the delta's rows,
// in key order), so callers get the whole shard, byte for byte what a full
// checkpoint at the same cut holds; ReadShardFile reads one file as it is.
// A checkpoint counts as valid only with its whole chain (ErrChain names
// the broken link), and Prune keeps every checkpoint a kept one needs.
//
// # One job per directory, and only that directory
//
// The chief holds Lock on its checkpoint directory for the whole job (the
// file paramserv.lock, naming the job, host, pid and a heartbeat, and the
// kernel lock of paramserv.lock.held where the filesystem keeps locks), so
// a second job given the same directory is refused at start; a restarted
// chief of the same job (JobID) takes it back, and a crashed holder's lock
// is taken over, at once on its own host. A ps confines the directories that Checkpoint and Restore
// requests name to its own --checkpoint_dir with Within.
//
// # Concurrency
//
// The package holds no state. WriteShard calls for different shards of a
// checkpoint may run concurrently; WriteManifest must follow all of them.
// Readers and Prune may run while a newer checkpoint is being written: they
// ignore it until its manifest exists, and Prune does not delete it.
package checkpoint
