package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"time"

	"github.com/paramserv/paramserv/internal/vfs"
)

// FormatVersion is the format of a full checkpoint, which every version of
// this package reads.
const FormatVersion = 1

// DeltaFormatVersion is the format of a checkpoint with delta shards (see
// Manifest.Kind). A program that reads only FormatVersion refuses such a
// checkpoint (ErrVersion) instead of restoring a delta as if it were the
// whole state.
const DeltaFormatVersion = 2

// ChecksumFormatVersion is the format of a checkpoint whose shards record a
// chunked CRC-32C (ShardInfo.Checksum) instead of a SHA-256, full or delta,
// and the newest this package reads. WriteShard records that checksum, so
// every checkpoint this package writes has this version; a program that
// knows only SHA-256 refuses it (ErrVersion: "format_version 3 is newer
// than this program reads") rather than reading it as damaged or unchecked.
const ChecksumFormatVersion = 3

// AnyOrderFormatVersion is the format of a checkpoint with a shard whose
// sparse tables' keys are in no particular order (ShardInfo.AnyOrder: the
// ps wrote its rows as its memory holds them, with no sort). A program
// that knows only ascending keys
// refuses it (ErrVersion) rather than setting the checkpoint aside as
// damaged.
const AnyOrderFormatVersion = 4

// IndexFormatVersion is the format of a checkpoint with a shard that holds
// its sparse tables' indexes beside their rows (ShardInfo.Indexed, keys in
// any order), and the newest this package reads. A program of version 4
// would take the index tensor for a column of the table when it applies a
// delta to the shard; it refuses the checkpoint (ErrVersion) instead.
const IndexFormatVersion = 5

// Checkpoint kinds (Manifest.Kind).
const (
	KindFull  = "full"
	KindDelta = "delta"
)

// MaxManifestSize bounds the manifest a reader accepts.
const MaxManifestSize = 64 << 20

// Manifest describes one complete checkpoint. It is written last, by the
// chief, once every shard is on disk; a checkpoint exists only once its
// manifest does.
type Manifest struct {
	// FormatVersion of the checkpoint; WriteManifest fills in a zero.
	FormatVersion int `json:"format_version"`
	// Step is the checkpoint's global step, and names its directory.
	Step int64 `json:"step"`
	// Time the checkpoint was taken, as the caller's clock said.
	Time time.Time `json:"time"`
	// Mode is the consistency mode training ran in: "sync", "async", ...
	Mode string `json:"mode"`
	// NumPS and NumWorkers are the shape of the cluster that wrote it
	// (NumPS is normally len(Shards); it is not checked).
	NumPS      int `json:"num_ps"`
	NumWorkers int `json:"num_workers"`
	// Optimizer names the update rule and its hyper-parameters, as JSON
	// (an optim.Config, say).
	Optimizer json.RawMessage `json:"optimizer,omitempty"`
	// Shards lists the shard files, Shards[k] being shard k.
	Shards []ShardInfo `json:"shards"`
	// Variables and Tables say where each dense variable and sparse
	// table lives.
	Variables []VariableInfo `json:"variables,omitempty"`
	Tables    []TableInfo    `json:"tables,omitempty"`
	// Meta is free-form.
	Meta map[string]string `json:"meta,omitempty"`

	// Kind is KindDelta for an incremental checkpoint: one whose shards
	// (some or all) hold only what changed since the checkpoint at Parent,
	// the previous link of a chain that starts at the full checkpoint at
	// Base. Empty or KindFull: every shard holds the whole state, and
	// Parent and Base are unused. Readers (ReadShard) apply the chain.
	Kind   string `json:"kind,omitempty"`
	Parent int64  `json:"parent,omitempty"`
	Base   int64  `json:"base,omitempty"`
}

// IsDelta reports whether m is an incremental checkpoint.
func (m Manifest) IsDelta() bool { return m.Kind == KindDelta }

// KindName is m's kind as reports print it: "full" or "delta".
func (m Manifest) KindName() string {
	if m.IsDelta() {
		return KindDelta
	}
	return KindFull
}

// ShardInfo describes one shard file, as WriteShard returns it.
type ShardInfo struct {
	// Index is k in shard-<k>-of-<n>.
	Index int `json:"index"`
	// File is the file's name inside the checkpoint directory.
	File string `json:"file"`
	// Size in bytes and checksum of the whole file: SHA-256 (lower-case
	// hex) in checkpoints of format version 1 and 2, or Checksum, "<kind>:
	// <hex>" (ChecksumCRC32C4M), in those of ChecksumFormatVersion. One
	// of the two is set.
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256,omitempty"`
	Checksum string `json:"checksum,omitempty"`
	// Step is the step the shard's state reflects (Shard.Step).
	Step int64 `json:"step"`
	// Tensors lists the file's tensors in file order.
	Tensors []TensorInfo `json:"tensors"`
	// Delta: the file holds only what changed since the same shard of the
	// checkpoint at Parent (see Shard.Delta for its tensors).
	Delta  bool  `json:"delta,omitempty"`
	Parent int64 `json:"parent,omitempty"`
	// AnyOrder: the file's sparse tables have their keys in no particular
	// order (Shard.AnyOrder); else they strictly ascend. Only in
	// checkpoints of AnyOrderFormatVersion.
	AnyOrder bool `json:"keys_any_order,omitempty"`
	// Indexed: the file holds the index of some of its sparse tables
	// (Shard.Indexed). Only with AnyOrder, in checkpoints of
	// IndexFormatVersion.
	Indexed bool `json:"table_index,omitempty"`
}

// version is the format version of the shard's file.
func (s ShardInfo) version() int {
	switch {
	case s.Indexed:
		return IndexFormatVersion
	case s.AnyOrder:
		return AnyOrderFormatVersion
	case s.Delta:
		return DeltaFormatVersion
	}
	return FormatVersion
}

// usesAnyOrder reports whether a shard of m has keys in no order, which
// needs AnyOrderFormatVersion.
func (m Manifest) usesAnyOrder() bool {
	return slices.ContainsFunc(m.Shards, func(s ShardInfo) bool { return s.AnyOrder })
}

// usesIndex reports whether a shard of m holds a table's index, which
// needs IndexFormatVersion.
func (m Manifest) usesIndex() bool {
	return slices.ContainsFunc(m.Shards, func(s ShardInfo) bool { return s.Indexed })
}

// Rows is the total number of rows of table name across the shards, from
// the shapes recorded in the manifest. For a delta checkpoint it counts the
// rows its own files hold (those that changed), not the table's.
func (m Manifest) Rows(table string) int64 {
	var n int64
	for _, s := range m.Shards {
		for _, t := range s.Tensors {
			if t.Name == KeysName(table) && len(t.Shape) == 1 {
				n += t.Shape[0]
			}
		}
	}
	return n
}

// Validate checks that the manifest is self-consistent: shard k is named
// shard-k-of-n with a plausible size and checksum, and every variable and
// table is found, with the right shapes, in the shards it names. Errors
// wrap ErrInvalid.
func (m Manifest) Validate() error {
	if err := m.validate(); err != nil {
		return fmt.Errorf("checkpoint: invalid manifest: %w", err)
	}
	return nil
}

// validate is Validate, returning a bare reason.
func (m Manifest) validate() error {
	if err := m.validateHeader(); err != nil {
		return err
	}
	if err := m.validateKind(); err != nil {
		return err
	}
	ix, err := m.indexShards()
	if err != nil {
		return err
	}
	seen := map[string]bool{} // the names of variables and tables so far
	for _, v := range m.Variables {
		if err := ix.checkVariable(v, seen); err != nil {
			return err
		}
	}
	for _, tb := range m.Tables {
		if err := ix.checkTable(tb, seen); err != nil {
			return err
		}
	}
	return nil
}

// invalid is a manifest's reason to be invalid.
func invalid(format string, args ...any) error {
	return errorf(ErrInvalid, format, args...)
}

// validateHeader checks the manifest's step, shard count, optimizer and
// training record.
func (m Manifest) validateHeader() error {
	if m.Step < 0 {
		return invalid("step %d is negative", m.Step)
	}
	if len(m.Shards) == 0 {
		return invalid("no shards")
	}
	if len(m.Optimizer) > 0 && !json.Valid(m.Optimizer) {
		return invalid("optimizer is not valid JSON")
	}
	// The training record must read (an optimizer field nested thousands
	// deep, say, does not): else the checkpoint passes here and fails
	// the restore that reads it.
	if _, err := m.Training(); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// validateKind checks that the kind, the shards' delta marks, the parent
// and base steps and the format version agree.
func (m Manifest) validateKind() error {
	deltas := 0
	for _, s := range m.Shards {
		if s.Delta {
			deltas++
		}
	}
	switch {
	case m.Kind != "" && m.Kind != KindFull && m.Kind != KindDelta:
		return invalid("kind %q (want %q or %q)", m.Kind, KindFull, KindDelta)
	case m.IsDelta() && deltas == 0:
		return invalid("kind %q but no shard is a delta", m.Kind)
	case !m.IsDelta() && deltas > 0:
		return invalid("%d delta shards in a checkpoint of kind %q", deltas, m.KindName())
	case m.IsDelta() && (m.Parent < 0 || m.Parent >= m.Step || m.Base < 0 || m.Base > m.Parent):
		return invalid("delta of step %d has parent %d and base %d (want 0 <= base <= parent < step)", m.Step, m.Parent, m.Base)
	case m.IsDelta() && m.FormatVersion != 0 && m.FormatVersion < DeltaFormatVersion:
		return invalid("delta checkpoint of format_version %d (want %d)", m.FormatVersion, DeltaFormatVersion)
	}
	return nil
}

// shardIndex is a valid manifest's shards with their tensors by name, for
// checking what the variables and tables say they hold.
type shardIndex struct {
	m       Manifest
	tensors []map[string]TensorInfo // by shard, then name
}

// indexShards checks each shard's entry and indexes its tensors.
func (m Manifest) indexShards() (shardIndex, error) {
	n := len(m.Shards)
	ix := shardIndex{m: m, tensors: make([]map[string]TensorInfo, n)}
	for k, s := range m.Shards {
		switch {
		case s.Delta && s.Parent != m.Parent:
			return ix, invalid("shards[%d] is a delta of step %d, the manifest's parent is %d", k, s.Parent, m.Parent)
		case s.Index != k:
			return ix, invalid("shards[%d] has index %d", k, s.Index)
		case s.File != ShardFileName(k, n):
			return ix, invalid("shards[%d] is file %q, want %q", k, s.File, ShardFileName(k, n))
		case s.Size < 8:
			return ix, invalid("%s: size %d is too small", s.File, s.Size)
		case s.Step < 0:
			return ix, invalid("%s: step %d is negative", s.File, s.Step)
		}
		if err := s.validChecksum(); err != nil {
			return ix, err
		}
		if s.Checksum != "" && m.FormatVersion != 0 && m.FormatVersion < ChecksumFormatVersion {
			return ix, invalid("%s: a %s checksum in a checkpoint of format_version %d (want %d)", s.File, ChecksumCRC32C4M, m.FormatVersion, ChecksumFormatVersion)
		}
		switch {
		case s.AnyOrder && m.FormatVersion != 0 && m.FormatVersion < AnyOrderFormatVersion:
			return ix, invalid("%s: keys in any order in a checkpoint of format_version %d (want %d)", s.File, m.FormatVersion, AnyOrderFormatVersion)
		case s.AnyOrder && s.Delta:
			return ix, invalid("%s: a delta shard with keys in any order", s.File)
		case s.Indexed && !s.AnyOrder:
			return ix, invalid("%s: a table index in a shard whose keys ascend", s.File)
		case s.Indexed && m.FormatVersion != 0 && m.FormatVersion < IndexFormatVersion:
			return ix, invalid("%s: a table index in a checkpoint of format_version %d (want %d)", s.File, m.FormatVersion, IndexFormatVersion)
		}
		ix.tensors[k] = make(map[string]TensorInfo, len(s.Tensors))
		for _, t := range s.Tensors {
			ix.tensors[k][t.Name] = t
		}
	}
	return ix, nil
}

// find is the tensor name of shard, which what (a variable or a table)
// says is there.
func (ix shardIndex) find(what string, shard int, name string) (TensorInfo, error) {
	if shard < 0 || shard >= len(ix.tensors) {
		return TensorInfo{}, invalid("%s: shard %d out of range [0,%d)", what, shard, len(ix.tensors))
	}
	t, ok := ix.tensors[shard][name]
	if !ok {
		return TensorInfo{}, invalid("%s: %s has no tensor %q", what, ix.m.Shards[shard].File, name)
	}
	return t, nil
}

// checkVariable checks a variable's name (not in seen, which it joins)
// and that its parts cover its rows, each with its values and slots in
// its shard as F32 of the part's shape.
func (ix shardIndex) checkVariable(v VariableInfo, seen map[string]bool) error {
	what := fmt.Sprintf("variable %q", v.Name)
	if v.Name == "" || seen[v.Name] {
		return invalid("%s: empty or repeated name", what)
	}
	seen[v.Name] = true
	if len(v.Parts) == 0 {
		return invalid("%s: no parts", what)
	}
	split := len(v.Parts) > 1 || v.Parts[0].Rows != nil
	var next int64 // the first row not yet covered by a part
	for i, p := range v.Parts {
		want := v.Shape
		if split {
			if len(p.Rows) != 2 || len(v.Shape) == 0 || p.Rows[0] != next || p.Rows[1] < p.Rows[0] {
				return invalid("%s: part %d rows %v do not continue from row %d", what, i, p.Rows, next)
			}
			next = p.Rows[1]
			want = append([]int64{p.Rows[1] - p.Rows[0]}, v.Shape[1:]...)
		}
		if err := ix.checkPart(what, v, p.Shard, want); err != nil {
			return err
		}
	}
	if split && next != v.Shape[0] {
		return invalid("%s: parts cover rows [0,%d) of %d", what, next, v.Shape[0])
	}
	return nil
}

// checkPart checks that shard holds the values and slots of a part of v
// as F32 of shape want; a delta shard holds only the variables that
// changed.
func (ix shardIndex) checkPart(what string, v VariableInfo, shard int, want []int64) error {
	for _, name := range append([]string{v.Name}, slotNames(v.Name, v.Slots)...) {
		if shard >= 0 && shard < len(ix.tensors) && ix.m.Shards[shard].Delta {
			if _, ok := ix.tensors[shard][name]; !ok {
				continue
			}
		}
		t, err := ix.find(what, shard, name)
		if err != nil {
			return err
		}
		file := ix.m.Shards[shard].File
		if !slices.Equal(t.Shape, want) {
			return invalid("%s: %s tensor %q has shape %v, want %v", what, file, name, t.Shape, want)
		}
		if t.DType != F32 {
			return invalid("%s: %s tensor %q is %s, want F32", what, file, name, t.DType)
		}
	}
	return nil
}

// checkTable checks a table's name (not in seen, which it joins), its
// width, and its keys, values, slots and (in a delta) deleted keys in each
// of its shards.
func (ix shardIndex) checkTable(tb TableInfo, seen map[string]bool) error {
	what := fmt.Sprintf("table %q", tb.Name)
	if tb.Name == "" || seen[tb.Name] {
		return invalid("%s: empty or repeated name", what)
	}
	seen[tb.Name] = true
	if tb.Dim < 1 {
		return invalid("%s: dim %d", what, tb.Dim)
	}
	for _, k := range tb.Shards {
		if err := ix.checkTableShard(what, tb, k); err != nil {
			return err
		}
	}
	return nil
}

// checkTableShard checks table tb's tensors in shard k.
func (ix shardIndex) checkTableShard(what string, tb TableInfo, k int) error {
	keys, err := ix.find(what, k, KeysName(tb.Name))
	if err != nil {
		return err
	}
	file := ix.m.Shards[k].File
	if keys.DType != U64 || len(keys.Shape) != 1 {
		return invalid("%s: %s keys are %s %v, want U64 [n]", what, file, keys.DType, keys.Shape)
	}
	rows := keys.Shape[0]
	vals, err := ix.find(what, k, ValuesName(tb.Name))
	if err != nil {
		return err
	}
	if vals.DType != F32 || !slices.Equal(vals.Shape, []int64{rows, tb.Dim}) {
		return invalid("%s: %s values are %s %v, want F32 [%d %d]", what, file, vals.DType, vals.Shape, rows, tb.Dim)
	}
	for _, name := range slotNames(tb.Name, tb.Slots) {
		t, err := ix.find(what, k, name)
		if err != nil {
			return err
		}
		if len(t.Shape) == 0 || t.Shape[0] != rows {
			return invalid("%s: %s tensor %q has shape %v, want %d rows", what, file, name, t.Shape, rows)
		}
	}
	if ix.m.Shards[k].Delta {
		del, err := ix.find(what, k, DeletedName(tb.Name))
		if err != nil {
			return err
		}
		if del.DType != U64 || len(del.Shape) != 1 {
			return invalid("%s: %s deleted keys are %s %v, want U64 [n]", what, file, del.DType, del.Shape)
		}
	}
	return nil
}

func slotNames(base string, slots []string) []string {
	out := make([]string, len(slots))
	for i, s := range slots {
		out[i] = SlotName(base, s)
	}
	return out
}

// WriteManifest completes the checkpoint at m.Step under dir by writing
// dir/ckpt-<step>/manifest.json, atomically (temporary file, fsync, rename,
// fsync of the directory). The chief calls it after every WriteShard of the
// checkpoint has returned, with their ShardInfos in m.Shards. It validates
// m, checks that each shard file is on disk with the recorded size (it does
// not re-read them), and refuses (ErrExists) to replace a manifest.
//
// When it returns nil the checkpoint is durable. When it returns an error
// the checkpoint may still have become visible (the rename happened but the
// directory fsync failed); it is complete and correct if so.
func WriteManifest(fsys vfs.FS, dir string, m Manifest) error {
	want := FormatVersion
	switch {
	case m.usesIndex():
		want = IndexFormatVersion
	case m.usesAnyOrder():
		want = AnyOrderFormatVersion
	case m.usesChunkCRC():
		want = ChecksumFormatVersion
	case m.IsDelta():
		want = DeltaFormatVersion
	}
	if m.FormatVersion == 0 {
		m.FormatVersion = want
	}
	if m.FormatVersion != want {
		return fmt.Errorf("%w: format version %d (this writer writes %d for a %s checkpoint)", ErrInvalid, m.FormatVersion, want, m.KindName())
	}
	if err := m.Validate(); err != nil {
		return err
	}
	cdir := filepath.Join(dir, CheckpointName(m.Step))
	if err := refuseComplete(fsys, cdir); err != nil {
		return err
	}
	for _, s := range m.Shards {
		fi, err := fsys.Stat(filepath.Join(cdir, s.File))
		if err != nil {
			return fmt.Errorf("checkpoint: write manifest: %w", err)
		}
		if fi.Size() != s.Size {
			return fmt.Errorf("checkpoint: write manifest: %w", errorf(ErrSize, "%s is %d bytes on disk, its ShardInfo says %d", s.File, fi.Size(), s.Size))
		}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint: write manifest: %w", err)
	}
	b = append(b, '\n')
	return writeAtomic(fsys, cdir, ManifestName, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// readManifest reads and checks dir/ckpt-<step>/manifest.json. Errors are
// reasons.
func readManifest(fsys vfs.FS, cdir string, step int64) (Manifest, error) {
	path := filepath.Join(cdir, ManifestName)
	f, err := fsys.Open(path)
	if err != nil {
		return Manifest{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxManifestSize+1))
	if err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", ManifestName, err)
	}
	if len(b) > MaxManifestSize {
		return Manifest{}, errorf(ErrFormat, "%s: larger than %d bytes", ManifestName, MaxManifestSize)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, errorf(ErrFormat, "%s: %s", ManifestName, jsonWhy(b, err))
	}
	switch {
	case m.FormatVersion == 0:
		return Manifest{}, errorf(ErrFormat, "%s: no format_version", ManifestName)
	case m.FormatVersion > IndexFormatVersion:
		return Manifest{}, errorf(ErrVersion, "%s: format_version %d is newer than this program reads (%d)", ManifestName, m.FormatVersion, IndexFormatVersion)
	case m.Step != step:
		return Manifest{}, errorf(ErrMismatch, "%s: step %d in the directory for step %d", ManifestName, m.Step, step)
	}
	if err := m.validate(); err != nil {
		return Manifest{}, errorf(ErrFormat, "%s: %w", ManifestName, err)
	}
	return m, nil
}

// jsonWhy says where and why b is not the JSON expected, in a reader's
// words: the byte, line and column of a syntax error, how far a file cut
// short got, and the field and kinds of a value of the wrong kind (not Go's
// type names).
func jsonWhy(b []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn) && syn.Offset >= int64(len(b)):
		return fmt.Sprintf("%v after %d bytes (the file is cut short)", err, len(b))
	case errors.As(err, &syn):
		line, col := lineCol(b, syn.Offset)
		return fmt.Sprintf("%v at byte %d (line %d, column %d)", err, syn.Offset, line, col)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "the whole file"
		}
		line, col := lineCol(b, typ.Offset)
		return fmt.Sprintf("%s is a JSON %s, want %s (byte %d, line %d, column %d)", field, typ.Value, jsonKind(typ.Type), typ.Offset, line, col)
	}
	return err.Error()
}

// lineCol is the 1-based line and column of byte offset off of b (the
// byte just read when the decoder stopped).
func lineCol(b []byte, off int64) (line, col int) {
	off = min(max(off, 1), int64(len(b)))
	before := b[:off-1]
	line = 1 + bytes.Count(before, []byte("\n"))
	col = len(before) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// jsonKind names the JSON a Go type is read from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another kind"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another kind"
}
