// Package libsvm reads LIBSVM / svmlight text files of binary
// classification examples into sparsedata.Examples:
//
//	<label> <index>:<value> <index>:<value> ... [# comment]
//
// The rules, chosen for a logistic-regression trainer:
//
//   - Labels: "+1", "1" and "1.0" are the positive class (Label 1); "-1",
//     "0" and "-1.0" the negative one (Label 0). Any other label is an error.
//   - Keys: indices are 1-based, as in LIBSVM, and key = index-1, so a file
//     with num_features = 123 has keys 0..122 and index 0 is an error. With
//     Options.ZeroBased the indices are taken as keys unchanged.
//   - Indices must be strictly increasing within a line (LIBSVM's own rule),
//     so an example never repeats a key. When Options.NumFeatures > 0 every
//     key must be below it (sparse.ErrKeyRange).
//   - Values are float32 numbers; NaN, ±Inf and values beyond the float32
//     range are errors. Explicit zeros are kept.
//   - "#" starts a comment that runs to the end of the line. Lines that are
//     empty or hold only blanks and a comment are skipped without counting
//     as examples or errors. Tokens are separated by spaces or tabs; a
//     trailing "\r" is dropped.
//   - qid:<n> tokens (svmlight ranking groups) are ignored: they name a
//     query, not a feature. Their value must still be a non-negative integer.
//
// A Reader streams one file with bounded memory (one line buffer,
// sparse.DefaultMaxLineBytes unless Options.MaxLineBytes says otherwise) and
// allocates nothing per line once its buffers have grown. Next returns an
// Example owned by the Reader, valid until the next call. ReadFile,
// ReadFiles and ReadPart load whole files into a compact sparsedata.Dataset.
//
// Each worker reads its own part: Options.Partition (or ReadPart) selects the
// lines whose 0-based index is worker mod numWorkers, as described in
// package sparsedata.
//
// A malformed line is a *sparsedata.ParseError naming the file, line and token,
// for example
//
//	a9a:17: token "3:x": value is not a number
//
// With Options.SkipBadLines such a line is skipped and counted in
// Stats().Skipped instead.
package libsvm
