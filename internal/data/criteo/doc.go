// Package criteo reads Criteo-style click logs (the Display Advertising
// Challenge "train.txt" layout) into sparsedata.Examples:
//
//	<label> \t I1 \t ... \t I13 \t C1 \t ... \t C26
//
// one example per line: a 0/1 label, Options.IntFields integer fields and
// Options.CatFields categorical fields (13 and 26 by default), every field
// possibly empty (missing). Fields are numbered 0, 1, ... in column order
// after the label: integer field j (Criteo's I(j+1)) is field j, categorical
// field j (C(j+1)) is field IntFields+j.
//
// # Keys
//
// Every present field becomes one key with value 1; a missing field gives
// no key. Keys are pure functions of (field, content), the same in every
// process and release:
//
//   - Categorical: CatKey(field, raw bytes). Any bytes but tab are a value;
//     Criteo's are 8 lowercase hex digits. The bytes are hashed as they are
//     (case-sensitive, not decoded).
//   - Integer v: the bucket b = Bucket(v) = floor(ln(v)^2) for v > 2 and v
//     itself otherwise (negative values included), as in the winning
//     solution of the Criteo challenge (guestwalk/kaggle-2014-criteo), and
//     key = IntKey(field, b).
//
// Both hash FNV-1a 64 over the field number (4 bytes little-endian), a tag
// byte ('C' or 'I') and the content (the value bytes, or the bucket as 8
// bytes little-endian two's complement), then apply the MurmurHash3 64-bit
// finaliser so that every output bit depends on every input bit (the
// placement of keys on servers hashes them again, but a trainer that masks
// keys to KeyBits relies on good low bits). With Options.KeyBits = k the
// keys are masked to their low k bits (the hashing trick with 2^k slots).
// Two distinct (field, value) pairs may collide, with probability about
// n²/2^65 for n distinct pairs; an example may then hold a key twice.
//
// Errors, SkipBadLines, line limits and worker partitioning behave as in
// package libsvm (see package sparsedata): a malformed line is a
// *sparsedata.ParseError such as
//
//	day_0:17: token "12x": integer field I3 is not an integer
package criteo
