// Package sparse holds the sparse tables of a parameter server shard: rows
// of float32 values of a fixed dimension, keyed by uint64 feature ids drawn
// from a space far larger than the rows held (hashed feature ids for a
// logistic regression, Dim 1; embedding ids, Dim 8 to 64), each row with the
// optimizer state of the table's optim.Rule.
//
// # Operations
//
// Pull reads rows and Push applies gradients to them with the rule. Rows
// come into being on first touch, subject to admission: with
// Config.MinCount > 1 a key gets a row only once it has been seen that many
// times (rare ids never cost memory), counted in a fixed-size count-min
// sketch. Until then it reads as its initial value, and its gradients are
// dropped. The initial value is a pure function of the key (Zeros,
// RandomNormal, RandomUniform with a seed), so it does not depend on the
// order keys arrive in or on how many shards split the key space. Evict
// drops rows no Push has touched for Config.EvictAfterSteps global steps,
// and their slots are reused. Export and Import copy all rows with their
// optimizer state, in key order, for checkpoints and resharding.
//
// # Memory
//
// A shard may hold hundreds of millions of rows, so a row costs its payload
// and little more: no Go map entry or slice per key. Keys, values and state
// sit in flat arrays in pages of up to 8192 rows, values and state
// interleaved so an update touches one span; an open-addressing index of 4-byte slots
// (row id plus hash tag, buckets of one cache line, 72-90% full) finds the
// row of a key. A row carries 4 more bytes for its last-touched step only
// when eviction is on, and 4 for its update count only when the rule reads
// its step argument (Adam). The overhead over the raw payload (8-byte key,
// 4*Dim value, 4*Dim per state slot) is otherwise 4.6 to 5.7 bytes per row,
// depending on where the index is in its growth cycle; MemoryBytes reports
// the total. A large index lives outside the Go heap (hugemem.Map), so
// the index a growth replaces goes back to the system at once instead of
// staying resident as garbage and raising the collector's target. A table
// restored from a mapped checkpoint file
// (ImportIndexedInPlace) keeps its keys and index in the file's pages,
// written copy-on-write, until it is garbage.
//
// # Concurrency
//
// A Table has no locks and must be used by one goroutine at a time; the
// server's loop owns it. Nothing in the package starts a goroutine: the
// large jobs (Export, Sorted, Import into an empty table, Frozen,
// FrozenSize.Alloc) run their pieces through the parallel.Runner given to
// SetParallel, which may run them on several cores at once (parallel.Serial,
// the caller's goroutine alone, by default). The results are the same
// whatever the Runner. A Frozen or FrozenShared copy may be read from
// another goroutine while its table changes (see FrozenShared).
package sparse
