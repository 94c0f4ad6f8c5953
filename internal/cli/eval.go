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

// Eval is `paramserv eval`: evaluate a checkpoint, in this process, as the
// chief evaluates the model at the end of training.
func Eval(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv eval", flag.ContinueOnError)
	f := defineTrainFlags(fs)
	step := fs.Int64("step", checkpoint.LatestStep, "the checkpoint's step (default: the latest valid one)")
	help := func(w io.Writer) {
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
	if code, done := parseArgs(fs, args, stdout, stderr, help); done {
		return code
	}
	if code, bad := extraArg(fs, stderr); bad {
		return code
	}
	for name := range evalHidden() {
		if f.set(name) {
			fmt.Fprintf(stderr, "paramserv eval: --%s means nothing to eval (it evaluates a checkpoint: see paramserv eval --help)\n", name)
			return 2
		}
	}
	if f.checkpointDir == "" {
		fmt.Fprintf(stderr, "paramserv eval: --checkpoint_dir is required\n")
		return 2
	}
	f.cluster = func() clusterFlagsT { return localProbeCluster(1, 1) }
	cfg, err := f.config("", func(string, ...any) {})
	if err != nil {
		fmt.Fprintf(stderr, "paramserv eval: %v\n", err)
		return 2
	}
	if e, _ := catalog.Lookup(cfg.Model); !e.Builtin() {
		fmt.Fprintf(stderr, "paramserv eval: --model=%s: eval evaluates the built-in models (%s); %s is a program on the public API: paramserv export writes its checkpoint for that program to read\n",
			cfg.Model, strings.Join(catalog.BuiltinNames(), ", "), cfg.Model)
		return 2
	}
	if cfg.ResultFile != "" {
		if err := checkResultFile(cfg.ResultFile); err != nil {
			fmt.Fprintf(stderr, "paramserv eval: %v\n", err)
			return 2
		}
	}
	dir, s, err := resolveCheckpoint(f.checkpointDir, *step, f.set("step"))
	if err == nil {
		err = checkpointDirArg(dir)
	}
	if err == nil && cfg.ResultFile != "" {
		err = outsideCheckpoints("result_file", cfg.ResultFile, dir)
	}
	if err != nil {
		fmt.Fprintf(stderr, "paramserv eval: %v\n", err)
		return 2
	}
	logf := newLogger(stderr)
	logf("%s", version.Get().Short())
	man, tensors, err := joinCheckpoint(dir, s, false)
	if err != nil {
		fmt.Fprintf(stderr, "paramserv eval: %v\n", err)
		return 1
	}
	name := filepath.Join(dir, checkpoint.CheckpointName(man.Step))
	data := cfg.Data
	data.Worker, data.NumWorkers, data.Logf = 0, 1, logf
	m, err := catalog.New(cfg.Model, data)
	if err != nil {
		fmt.Fprintf(stderr, "paramserv eval: %v\n", err)
		return 2
	}
	byName := map[string]checkpoint.Tensor{}
	for _, t := range tensors {
		byName[t.Name] = t
	}
	params := model.NewParams(m.Variables())
	for _, v := range m.Variables() {
		t, ok := byName[v.Name]
		if !ok {
			fmt.Fprintf(stderr, "paramserv eval: %s has no variable %q: it holds another model than --model=%s\n", name, v.Name, cfg.Model)
			return 2
		}
		vals, _ := t.Float32s()
		if len(vals) != v.Size() {
			fmt.Fprintf(stderr, "paramserv eval: %s: variable %q has %d values, --model=%s wants %d (another --hidden_units?)\n", name, v.Name, len(vals), cfg.Model, v.Size())
			return 2
		}
		copy(params[v.Name], vals)
	}
	var metrics map[string]float64
	if sm, ok := m.(model.SparseModel); ok {
		tables := sm.Tables()
		for _, tb := range tables {
			vals, ok := byName[checkpoint.ValuesName(tb.Name)]
			if _, hasKeys := byName[checkpoint.KeysName(tb.Name)]; !ok || !hasKeys {
				fmt.Fprintf(stderr, "paramserv eval: %s has no sparse table %q: it holds another model than --model=%s\n", name, tb.Name, cfg.Model)
				return 2
			}
			if len(vals.Shape) != 2 || vals.Shape[1] != int64(tb.Dim) {
				fmt.Fprintf(stderr, "paramserv eval: %s: table %q has rows of shape %v, --model=%s wants %d values a row\n", name, tb.Name, vals.Shape, cfg.Model, tb.Dim)
				return 2
			}
		}
		rows := make([]map[uint64][]float32, len(tables))
		for i, tb := range tables {
			rows[i] = tableRows(byName, tb)
		}
		metrics, err = sm.EvaluateSparse(params, func(t int, keys []uint64, out []float32) error {
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
	} else {
		metrics, err = m.Evaluate(params)
	}
	if err != nil {
		fmt.Fprintf(stderr, "paramserv eval: evaluation: %v\n", err)
		return 1
	}
	mj, _ := json.Marshal(metrics)
	logf("eval of %s: global step %d, %s, metrics %s", name, man.Step, man.Mode, mj)
	if cfg.ResultFile == "" {
		return 0
	}
	r := map[string]any{
		"model": cfg.Model, "mode": man.Mode, "global_step": man.Step, "checkpoint": name,
		"workers": man.NumWorkers, "ps": man.NumPS, "metrics": metrics, "loss": metrics["loss"],
		"version": version.Get().Short(), "flags": f.record(cfg.Config),
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
	err = trainer.WriteJSON(cfg.ResultFile, r)
	if err != nil {
		fmt.Fprintf(stderr, "paramserv eval: --result_file=%s: %v\n", cfg.ResultFile, err)
		return 1
	}
	return 0
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
