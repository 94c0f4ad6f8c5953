package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/vfs"
)

// ckptName matches the name of one checkpoint's directory, as ckpt ls
// prints it (ckpt/ckpt-3000).
var ckptName = regexp.MustCompile(`^ckpt-(\d+)$`)

// resolveCheckpoint turns what the user named into a checkpoint directory
// and a step: a checkpoint directory with step (LatestStep: the newest
// valid one), or one checkpoint's own directory (ckpt/ckpt-3000), which
// stands for its parent at its step. A --step (stepSet) must be >= 0 and
// agree with the step of a checkpoint named so.
func resolveCheckpoint(dir string, step int64, stepSet bool) (string, int64, error) {
	if stepSet && step < 0 {
		return "", 0, fmt.Errorf("--step=%d: want a step >= 0 (or no --step: the latest valid one)", step)
	}
	m := ckptName.FindStringSubmatch(filepath.Base(filepath.Clean(dir)))
	if m == nil {
		return dir, step, nil
	}
	// A directory named ckpt-N that is itself a checkpoint directory
	// (holds ckpt-* of its own) is taken as such.
	if own, _ := filepath.Glob(filepath.Join(dir, "ckpt-*")); len(own) > 0 {
		return dir, step, nil
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return dir, step, nil
	}
	if stepSet && step != n {
		return "", 0, fmt.Errorf("%s is the checkpoint of step %d, but --step=%d", dir, n, step)
	}
	return filepath.Dir(filepath.Clean(dir)), n, nil
}

// Export is `paramserv export`: a checkpoint's model as one safetensors
// file.
func Export(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv export", flag.ContinueOnError)
	dir := fs.String("checkpoint_dir", "", "the checkpoint directory (or one checkpoint in it, as ckpt ls names it: ckpt/ckpt-3000)")
	step := fs.Int64("step", checkpoint.LatestStep, "the checkpoint's step (default: the latest valid one)")
	out := fs.String("out", "", "the safetensors file to write")
	slots := fs.Bool("optimizer_state", false, "also write the optimizer's state (adam_m, ...) and per-row counters, as <name>/<slot>")
	help := func(w io.Writer) {
		fmt.Fprint(w, `Usage: paramserv export --checkpoint_dir=DIR --out=FILE [--step=N]

Writes the model of a checkpoint as one safetensors file that numpy or
PyTorch loads without paramserv: each dense variable whole, its parts on
every ps joined, under its own name; each sparse table as two tensors,
<table>/keys (I64 [n]: the uint64 keys' bits, so that every reader takes
them; numpy: .view(numpy.uint64)) and <table>/values (F32 [n, dim]), the
rows of every ps joined, each ps's in the order its checkpoint holds them
(not sorted by key). The file's __metadata__ says the step, the mode and
the cluster that wrote it.
`)
		printFlags(w, fs, false, nil)
	}
	if code, done := parseArgs(fs, args, stdout, stderr, help); done {
		return code
	}
	if code, bad := extraArg(fs, stderr); bad {
		return code
	}
	stepSet := false
	fs.Visit(func(fl *flag.Flag) { stepSet = stepSet || fl.Name == "step" })
	switch {
	case *dir == "":
		fmt.Fprintf(stderr, "paramserv export: --checkpoint_dir is required\n")
		return 2
	case *out == "":
		fmt.Fprintf(stderr, "paramserv export: --out is required (the safetensors file to write)\n")
		return 2
	}
	d, s, err := resolveCheckpoint(*dir, *step, stepSet)
	if err == nil {
		err = checkpointDirArg(d)
	}
	if err != nil {
		fmt.Fprintf(stderr, "paramserv export: %v\n", err)
		return 2
	}
	if err := checkOutFile("out", *out); err != nil {
		fmt.Fprintf(stderr, "paramserv export: %v\n", err)
		return 2
	}
	if err := outsideCheckpoints("out", *out, d); err != nil {
		fmt.Fprintf(stderr, "paramserv export: %v\n", err)
		return 2
	}
	m, tensors, err := joinCheckpoint(d, s, *slots)
	if err != nil {
		fmt.Fprintf(stderr, "paramserv export: %v\n", err)
		return 1
	}
	meta := map[string]string{
		"paramserv.step": strconv.FormatInt(m.Step, 10), "paramserv.mode": m.Mode,
		"paramserv.num_ps": strconv.Itoa(m.NumPS), "paramserv.num_workers": strconv.Itoa(m.NumWorkers),
		"paramserv.keys": "sparse table keys are uint64 stored bit for bit as I64",
	}
	if err := writeSafetensors(*out, tensors, meta); err != nil {
		fmt.Fprintf(stderr, "paramserv export: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %d tensors of %s (step %d) to %s\n", len(tensors), filepath.Join(d, checkpoint.CheckpointName(m.Step)), m.Step, *out)
	return 0
}

// joinCheckpoint reads the checkpoint at step under dir (LatestStep: the
// newest valid one) and joins each variable's parts and each table's
// shards into whole tensors: the variables first, in the manifest's order.
func joinCheckpoint(dir string, step int64, withSlots bool) (checkpoint.Manifest, []checkpoint.Tensor, error) {
	var m checkpoint.Manifest
	var err error
	if step == checkpoint.LatestStep {
		m, _, err = checkpoint.Verifier{Finite: true}.Latest(vfs.OS, dir)
	} else {
		// Every file of the chain, parents too, finite (a delta's
		// parent was not checked before).
		m, err = checkpoint.Verifier{Finite: true}.Load(vfs.OS, dir, step)
	}
	if err != nil {
		return m, nil, err
	}
	shards := make([]map[string]checkpoint.Tensor, len(m.Shards))
	for k := range m.Shards {
		s, err := checkpoint.ReadShard(vfs.OS, dir, m, k)
		if err == nil {
			// A checkpoint named by its step was not checked for values
			// that are not finite: no model is read from one that has any.
			err = checkpoint.CheckFinite(s)
		}
		if err != nil {
			return m, nil, err
		}
		shards[k] = s.ByName()
	}
	var out []checkpoint.Tensor
	for _, v := range m.Variables {
		names := []string{v.Name}
		if withSlots {
			for _, slot := range v.Slots {
				names = append(names, checkpoint.SlotName(v.Name, slot))
			}
		}
		parts := slices.Clone(v.Parts)
		slices.SortFunc(parts, func(a, b checkpoint.Part) int {
			if len(a.Rows) == 0 || len(b.Rows) == 0 {
				return 0
			}
			return int(a.Rows[0] - b.Rows[0])
		})
		for _, name := range names {
			var data []byte
			for _, p := range parts {
				t, ok := shards[p.Shard][name]
				if !ok {
					return m, nil, fmt.Errorf("checkpoint of step %d: shard %d lacks %q, which the manifest places there", m.Step, p.Shard, name)
				}
				data = append(data, t.Data...)
			}
			out = append(out, checkpoint.Tensor{Name: name, DType: checkpoint.F32, Shape: slices.Clone(v.Shape), Data: data})
		}
	}
	for _, tb := range m.Tables {
		names := []string{checkpoint.KeysName(tb.Name), checkpoint.ValuesName(tb.Name)}
		if withSlots {
			for _, slot := range tb.Slots {
				names = append(names, checkpoint.SlotName(tb.Name, slot))
			}
		}
		for _, name := range names {
			var joined checkpoint.Tensor
			for i, k := range tb.Shards {
				t, ok := shards[k][name]
				if !ok {
					return m, nil, fmt.Errorf("checkpoint of step %d: shard %d lacks %q, which the manifest places there", m.Step, k, name)
				}
				if i == 0 {
					joined = checkpoint.Tensor{Name: name, DType: t.DType, Shape: slices.Clone(t.Shape)}
					joined.Shape[0] = 0
				}
				joined.Shape[0] += t.Shape[0]
				joined.Data = append(joined.Data, t.Data...)
			}
			if joined.DType == checkpoint.U64 {
				joined.DType = checkpoint.I64 // the same bits; every reader takes I64
			}
			if len(tb.Shards) > 0 {
				out = append(out, joined)
			}
		}
	}
	return m, out, nil
}

// writeSafetensors writes the file atomically: a temporary file beside it,
// then a rename.
func writeSafetensors(path string, tensors []checkpoint.Tensor, meta map[string]string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".export-*")
	if err != nil {
		return err
	}
	defer addTemp(tmp.Name())()
	defer os.Remove(tmp.Name())
	if _, err := checkpoint.EncodeSafetensors(tmp, tensors, meta); err != nil {
		tmp.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}
