package cli

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strings"

	"github.com/paramserv/paramserv/internal/catalog"
	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/trainer"
	"github.com/paramserv/paramserv/internal/version"
)

// evalHidden are train's flags that mean nothing to eval: the cluster,
// the optimizer, the schedule, checkpoint writing, timeouts.
func evalHidden() map[string]bool {
	h := map[string]bool{}
	for name, g := range flagGroups {
		switch g {
		case groupCluster, groupCheckpoints, groupRecovery, groupTF:
			h[name] = true
		case groupTraining:
			switch name {
			case "result_file", "seed", "batch_size":
			default:
				h[name] = true
			}
		}
	}
	for _, name := range ignoredTFFlags {
		h[name] = true
	}
	delete(h, "checkpoint_dir")
	return h
}

func init() {
	commandPlaceholders["paramserv eval --model"] = strings.Join(catalog.BuiltinNames(), "|")
}

// evalUsage writes eval's help text.
func evalUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: paramserv eval --checkpoint_dir=DIR --model=M [model flags] [--step=N]

Evaluates the model of a checkpoint (the newest valid one of DIR, or of
step N; DIR/ckpt-N, as ckpt ls names it, is step N) as the chief does at the
end of training, in this process, with no ps: the same metrics in the log
and, with --result_file, the same result file, naming the checkpoint.
Give the model flags the job was trained with (--model, --hidden_units,
--train_data, --test_data, ...; sparse_lr reads --train_data to build). A
sparse table's key the checkpoint lacks reads as zeros. The built-in
models evaluate here (linreg, mnist, sparse_lr); those written on the
public API (mf, lda, logreg_lbfgs, deep_ctr) evaluate in their own
program, from the file paramserv export writes.
`)
	printFlags(w, fs, true, evalHidden())
}

// Eval is `paramserv eval`: evaluate a checkpoint, in this process, as the
// chief evaluates the model at the end of training.
func Eval(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv eval", flag.ContinueOnError)
	f := defineTrainFlags(fs)
	step := fs.Int64("step", checkpoint.LatestStep, "the checkpoint's step (default: the latest valid one)")
	if code, done := parseArgs(fs, args, stdout, stderr, func(w io.Writer) { evalUsage(w, fs) }); done {
		return code
	}
	if code, bad := extraArg(fs, stderr); bad {
		return code
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "paramserv eval: %v\n", err)
		return code
	}
	cfg, dir, s, err := f.evalTarget(*step)
	if err != nil {
		return fail(2, err)
	}
	logf := newLogger(stderr)
	logf("%s", version.Get().Short())
	man, tensors, err := joinCheckpoint(dir, s, false)
	if err != nil {
		return fail(1, err)
	}
	name := filepath.Join(dir, checkpoint.CheckpointName(man.Step))
	data := cfg.Data
	data.Worker, data.NumWorkers, data.Logf = 0, 1, logf
	m, err := catalog.New(cfg.Model, data)
	if err != nil {
		return fail(2, err)
	}
	byName := map[string]checkpoint.Tensor{}
	for _, t := range tensors {
		byName[t.Name] = t
	}
	params, err := checkpointParams(m, byName, name, cfg.Model)
	if err == nil {
		err = checkSparseTables(m, byName, name, cfg.Model)
	}
	if err != nil {
		return fail(2, err)
	}
	metrics, err := evaluateCheckpoint(m, params, byName)
	if err != nil {
		return fail(1, fmt.Errorf("evaluation: %w", err))
	}
	mj, _ := json.Marshal(metrics)
	logf("eval of %s: global step %d, %s, metrics %s", name, man.Step, man.Mode, mj)
	if cfg.ResultFile == "" {
		return 0
	}
	r := evalResult(cfg.Model, man, name, metrics, f.record(cfg.Config))
	if err := trainer.WriteJSON(cfg.ResultFile, r); err != nil {
		return fail(1, fmt.Errorf("--result_file=%s: %w", cfg.ResultFile, err))
	}
	return 0
}

// evalTarget checks eval's flags and finds what to evaluate: the model's
// configuration, and the checkpoint directory and step to read.
func (f *trainFlags) evalTarget(step int64) (cfg taskConfig, dir string, s int64, err error) {
	for name := range evalHidden() {
		if f.set(name) {
			return cfg, "", 0, fmt.Errorf("--%s means nothing to eval (it evaluates a checkpoint: see paramserv eval --help)", name)
		}
	}
	if f.checkpointDir == "" {
		return cfg, "", 0, fmt.Errorf("--checkpoint_dir is required")
	}
	f.cluster = func() clusterFlagsT { return localProbeCluster(1, 1) }
	if cfg, err = f.config("", func(string, ...any) {}); err != nil {
		return cfg, "", 0, err
	}
	if e, _ := catalog.Lookup(cfg.Model); !e.Builtin() {
		return cfg, "", 0, fmt.Errorf("--model=%s: eval evaluates the built-in models (%s); %s is a program on the public API: paramserv export writes its checkpoint for that program to read",
			cfg.Model, strings.Join(catalog.BuiltinNames(), ", "), cfg.Model)
	}
	if cfg.ResultFile != "" {
		if err := checkResultFile(cfg.ResultFile); err != nil {
			return cfg, "", 0, err
		}
	}
	dir, s, err = resolveCheckpoint(f.checkpointDir, step, f.set("step"))
	if err == nil {
		err = checkpointDirArg(dir)
	}
	if err == nil && cfg.ResultFile != "" {
		err = outsideCheckpoints("result_file", cfg.ResultFile, dir)
	}
	return cfg, dir, s, err
}

// checkpointParams fills the model's dense variables from the checkpoint
// name's tensors, each of which must be there with the model's size.
func checkpointParams(m model.Model, byName map[string]checkpoint.Tensor, name, modelName string) (model.Params, error) {
	params := model.NewParams(m.Variables())
	for _, v := range m.Variables() {
		t, ok := byName[v.Name]
		if !ok {
			return nil, fmt.Errorf("%s has no variable %q: it holds another model than --model=%s", name, v.Name, modelName)
		}
		vals, _ := t.Float32s()
		if len(vals) != v.Size() {
			return nil, fmt.Errorf("%s: variable %q has %d values, --model=%s wants %d (another --hidden_units?)", name, v.Name, len(vals), modelName, v.Size())
		}
		copy(params[v.Name], vals)
	}
	return params, nil
}

// checkSparseTables checks that the checkpoint name holds each sparse
// table of the model, with the model's row width.
func checkSparseTables(m model.Model, byName map[string]checkpoint.Tensor, name, modelName string) error {
	sm, ok := m.(model.SparseModel)
	if !ok {
		return nil
	}
	for _, tb := range sm.Tables() {
		vals, ok := byName[checkpoint.ValuesName(tb.Name)]
		if _, hasKeys := byName[checkpoint.KeysName(tb.Name)]; !ok || !hasKeys {
			return fmt.Errorf("%s has no sparse table %q: it holds another model than --model=%s", name, tb.Name, modelName)
		}
		if len(vals.Shape) != 2 || vals.Shape[1] != int64(tb.Dim) {
			return fmt.Errorf("%s: table %q has rows of shape %v, --model=%s wants %d values a row", name, tb.Name, vals.Shape, modelName, tb.Dim)
		}
	}
	return nil
}

// evaluateCheckpoint evaluates the model at params; a sparse model reads
// its rows from the checkpoint's tables, a key they lack as zeros.
func evaluateCheckpoint(m model.Model, params model.Params, byName map[string]checkpoint.Tensor) (map[string]float64, error) {
	sm, ok := m.(model.SparseModel)
	if !ok {
		return m.Evaluate(params)
	}
	tables := sm.Tables()
	rows := make([]map[uint64][]float32, len(tables))
	for i, tb := range tables {
		rows[i] = tableRows(byName, tb)
	}
	return sm.EvaluateSparse(params, func(t int, keys []uint64, out []float32) error {
		dim := tables[t].Dim
		for i, k := range keys {
			row := out[i*dim : (i+1)*dim]
			if r, ok := rows[t][k]; ok {
				copy(row, r)
			} else {
				clear(row)
			}
		}
		return nil
	})
}

// evalResult is the result file of an eval: what training's chief
// writes, naming the checkpoint, with each metric also at the top level
// where its name is free.
func evalResult(modelName string, man checkpoint.Manifest, name string, metrics map[string]float64, flags map[string]string) map[string]any {
	r := map[string]any{
		"model": modelName, "mode": man.Mode, "global_step": man.Step, "checkpoint": name,
		"workers": man.NumWorkers, "ps": man.NumPS, "metrics": metrics, "loss": metrics["loss"],
		"version": version.Get().Short(), "flags": flags,
	}
	keys := make([]string, 0, len(metrics))
	for k := range metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, taken := r[k]; !taken && !math.IsNaN(metrics[k]) {
			r[k] = metrics[k]
		}
	}
	if v, ok := metrics["val_cross_entropy"]; ok {
		r["loss"] = v
	}
	return r
}

// tableRows indexes a joined table's rows by key.
func tableRows(byName map[string]checkpoint.Tensor, tb model.Table) map[uint64][]float32 {
	keys, vals := byName[checkpoint.KeysName(tb.Name)], byName[checkpoint.ValuesName(tb.Name)]
	v, _ := vals.Float32s()
	rows := make(map[uint64][]float32, len(keys.Data)/8)
	for i := 0; i*8 < len(keys.Data) && (i+1)*tb.Dim <= len(v); i++ {
		rows[binary.LittleEndian.Uint64(keys.Data[8*i:])] = v[i*tb.Dim : (i+1)*tb.Dim]
	}
	return rows
}
