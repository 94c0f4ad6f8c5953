package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/paramserv/paramserv/internal/vfs"
)

// Entry is one checkpoint directory as List sees it.
type Entry struct {
	Name string
	Step int64
	// Manifest, when it could be read (even if a shard is damaged).
	Manifest Manifest
	// Size is the bytes on disk of all the files in the directory.
	Size int64
	// Err is nil for a valid checkpoint, else why it is not (see Skipped).
	Err error
}

// Status is "ok", "incomplete: <why>", "damaged: <why>" or, for a
// directory LatestSetAside set aside, "set aside: damaged: <why>".
func (e Entry) Status() string { return status(e.Err) }

// Listing is the report of `paramserv ckpt ls DIR`.
type Listing struct {
	Dir     string
	Entries []Entry // newest first
}

// List verifies every checkpoint under dir as Latest would (reading every
// shard through) and reports each, newest first; a directory that
// LatestSetAside set aside follows the checkpoint of its step, if any, with
// the reason its REASON file gives.
func List(fsys vfs.FS, dir string) (Listing, error) { return Verifier{}.List(fsys, dir) }

// List is the package's List, verified as v says.
func (v Verifier) List(fsys vfs.FS, dir string) (Listing, error) {
	des, err := fsys.ReadDir(dir)
	if err != nil {
		return Listing{}, fmt.Errorf("checkpoint: list %s: %w", dir, err)
	}
	l := Listing{Dir: dir}
	for _, de := range des {
		if !de.IsDir() {
			continue
		}
		name := de.Name()
		if step, ok := parseCheckpointName(name); ok {
			m, err := checkAs(fsys, dir, step, true, v.mode())
			l.Entries = append(l.Entries, Entry{
				Name:     name,
				Step:     step,
				Manifest: m,
				Size:     diskSize(fsys, filepath.Join(dir, name)),
				Err:      err,
			})
		} else if step, ok := parseSetAsideName(name); ok {
			why, err := readReason(fsys, filepath.Join(dir, name))
			if err != nil {
				why = fmt.Sprintf("(no %s: %v)", ReasonName, err)
			}
			l.Entries = append(l.Entries, Entry{
				Name: name,
				Step: step,
				Size: diskSize(fsys, filepath.Join(dir, name)),
				Err:  errorf(ErrSetAside, "%s", why),
			})
		}
	}
	slices.SortStableFunc(l.Entries, func(a, b Entry) int {
		if a.Step != b.Step {
			return cmpInt(b.Step, a.Step)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return l, nil
}

// diskSize adds up the sizes of the files in a directory (best effort).
func diskSize(fsys vfs.FS, dir string) int64 {
	des, err := fsys.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, de := range des {
		if fi, err := de.Info(); err == nil && !fi.IsDir() {
			n += fi.Size()
		}
	}
	return n
}

// String renders the listing as a table:
//
//	CHECKPOINT  STEP  TIME                  SIZE     KIND   PARENT    BASE      VARS  TABLES  STATUS
//	ckpt-600    600   2026-01-02T03:05:05Z  12 KiB   delta  ckpt-500  ckpt-400  4     2       ok
//	ckpt-500    500   2026-01-02T03:04:05Z  1.2 MiB  full   -         -         4     2       damaged: shard-1-of-2.safetensors: checksum mismatch: ...
//
// SIZE is the bytes of the directory itself: a delta's own files, not its
// chain's.
func (l Listing) String() string {
	var b strings.Builder
	if len(l.Entries) == 0 {
		fmt.Fprintf(&b, "no checkpoints in %s\n", l.Dir)
		return b.String()
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECKPOINT\tSTEP\tTIME\tSIZE\tKIND\tPARENT\tBASE\tVARS\tTABLES\tSTATUS")
	for _, e := range l.Entries {
		tm, kind, parent, base, vars, tables := "-", "-", "-", "-", "-", "-"
		if e.Manifest.FormatVersion != 0 {
			tm = formatTime(e.Manifest.Time)
			kind = e.Manifest.KindName()
			if e.Manifest.IsDelta() {
				parent, base = CheckpointName(e.Manifest.Parent), CheckpointName(e.Manifest.Base)
			}
			vars = fmt.Sprint(len(e.Manifest.Variables))
			tables = fmt.Sprint(len(e.Manifest.Tables))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.Step, tm, formatBytes(e.Size), kind, parent, base, vars, tables, e.Status())
	}
	tw.Flush()
	return b.String()
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// TensorStats summarizes one tensor of a shard.
type TensorStats struct {
	Shard int
	TensorInfo
	// Count is the number of elements.
	Count int64
	// For F32 and I64 tensors: NaNs counts the NaN elements, which the
	// other statistics leave out; Min, Max, Mean and L2 (the Euclidean
	// norm) are over the rest and are NaN when nothing is left.
	NaNs               int64
	Min, Max, Mean, L2 float64
}

// Inspection is the report of `paramserv ckpt inspect DIR`.
type Inspection struct {
	Dir      string
	Manifest Manifest
	// Skipped lists the newer checkpoints passed over, when the newest
	// valid one was asked for.
	Skipped []Skipped
	Tensors []TensorStats // by shard, then in file order
}

// LatestStep asks Inspect for the newest valid checkpoint.
const LatestStep = -1

// Inspect verifies the checkpoint at step under dir (LatestStep: the newest
// valid one), reads each shard in turn, and summarizes each tensor.
func Inspect(fsys vfs.FS, dir string, step int64) (Inspection, error) {
	in := Inspection{Dir: dir}
	var err error
	if step < 0 {
		in.Manifest, in.Skipped, err = Latest(fsys, dir)
	} else {
		in.Manifest, err = Load(fsys, dir, step)
	}
	if err != nil {
		return in, err
	}
	for k := range in.Manifest.Shards {
		s, err := ReadShard(fsys, dir, in.Manifest, k)
		if err != nil {
			return in, err
		}
		for _, t := range s.Tensors {
			in.Tensors = append(in.Tensors, stats(k, t))
		}
	}
	return in, nil
}

// stats summarizes t, which has been validated.
func stats(shard int, t Tensor) TensorStats {
	st := TensorStats{Shard: shard, TensorInfo: t.Info(), Count: int64(len(t.Data) / t.DType.Size())}
	var vals []float64
	switch t.DType {
	case F32:
		v, _ := t.Float32s()
		vals = make([]float64, len(v))
		for i, x := range v {
			vals[i] = float64(x)
		}
	case I64:
		v, _ := t.Int64s()
		vals = make([]float64, len(v))
		for i, x := range v {
			vals[i] = float64(x)
		}
	default:
		return st
	}
	st.Min, st.Max = math.Inf(1), math.Inf(-1)
	var sum, sq float64
	var n int64
	for _, x := range vals {
		if math.IsNaN(x) {
			st.NaNs++
			continue
		}
		n++
		st.Min, st.Max = math.Min(st.Min, x), math.Max(st.Max, x)
		sum += x
		sq += x * x
	}
	if n == 0 {
		st.Min, st.Max, st.Mean, st.L2 = math.NaN(), math.NaN(), math.NaN(), math.NaN()
		return st
	}
	st.Mean, st.L2 = sum/float64(n), math.Sqrt(sq)
	return st
}

// String renders the inspection: the manifest's summary, the checkpoints
// passed over, then one line per tensor.
func (in Inspection) String() string {
	var b strings.Builder
	m := in.Manifest
	for _, s := range in.Skipped {
		fmt.Fprintf(&b, "skipped %v\n", s)
	}
	fmt.Fprintf(&b, "%s in %s: step %d, time %s, mode %s, %d ps, %d workers, format %d\n",
		CheckpointName(m.Step), in.Dir, m.Step, formatTime(m.Time), orDash(m.Mode), m.NumPS, m.NumWorkers, m.FormatVersion)
	if m.IsDelta() {
		fmt.Fprintf(&b, "kind delta: changes since %s, in a chain from the full %s; the tensors below are the state with the chain applied\n",
			CheckpointName(m.Parent), CheckpointName(m.Base))
	}
	if len(m.Optimizer) > 0 {
		var opt bytes.Buffer
		if json.Compact(&opt, m.Optimizer) != nil {
			opt.Write(m.Optimizer)
		}
		fmt.Fprintf(&b, "optimizer: %s\n", opt.Bytes())
	}
	for _, s := range m.Shards {
		kind := ""
		if s.Delta {
			kind = ", delta of " + CheckpointName(s.Parent)
		}
		sumKind, sum := s.checksum()
		fmt.Fprintf(&b, "shard %d: %s, %s, step %d%s, %s %s\n", s.Index, s.File, formatBytes(s.Size), s.Step, kind, sumKind, abbrev(sum))
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tTENSOR\tDTYPE\tSHAPE\tSTATS")
	for _, t := range in.Tensors {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%v\t%s\n", t.Shard, t.Name, t.DType, t.Shape, t.statsString())
	}
	tw.Flush()
	return b.String()
}

func (t TensorStats) statsString() string {
	if t.DType == U64 {
		return fmt.Sprintf("count=%d", t.Count)
	}
	s := fmt.Sprintf("count=%d min=%.6g max=%.6g mean=%.6g l2=%.6g", t.Count, t.Min, t.Max, t.Mean, t.L2)
	if t.NaNs > 0 {
		s += fmt.Sprintf(" nan=%d", t.NaNs)
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
