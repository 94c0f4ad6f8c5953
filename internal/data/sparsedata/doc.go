// Package sparsedata holds what the sparse-data readers (packages libsvm and
// criteo) share: the Example type, a compact CSR Dataset, the ParseError a
// malformed line produces, the rule that splits a file's lines among
// workers, and a bounded line splitter.
//
// # Examples
//
// An Example is one labelled row of a sparse binary classification problem:
// a label (0 or 1) and parallel Keys and Vals slices. Keys are uint64 feature
// ids: small dense indices for LIBSVM files (index-1), hashed ids spread
// over the whole uint64 range for Criteo-style files. A reader's Next
// returns a pointer to an Example it owns and reuses; copy it (Clone, or
// Dataset.Append) to keep it past the next call.
//
// # Partitioning
//
// "Each worker reads its own part of the files": with Partition{Worker: w,
// NumWorkers: n}, a reader parses only the physical lines whose 0-based
// index i (counting every line, blank and comment lines included, across
// the files of one ReadFiles call in order) has i mod n == w. The parts of
// the n workers are therefore disjoint and together cover every line,
// whatever the lines hold, and each error keeps its exact file line
// number. Every worker still scans the bytes of the lines it does not own
// (a memchr per line, far cheaper than parsing them); where the data set
// is split into at least as many shard files as there are workers, handing
// each worker whole files is cheaper still and is the caller's choice.
//
// # Limits and errors
//
// Lines are bounded (DefaultMaxLineBytes unless the reader is told
// otherwise): a longer line is a ParseError wrapping ErrLineTooLong, not a
// growing buffer. Every malformed line is a *ParseError that names the
// file, the 1-based line number, the offending token and what was
// expected, for instance
//
//	a9a:17: token "3:x": value is not a number
//
// and wraps ErrSyntax, ErrKeyRange or ErrLineTooLong for errors.Is. With the
// readers' SkipBadLines option such lines are counted in Stats.Skipped and
// the reader goes on.
package sparsedata
