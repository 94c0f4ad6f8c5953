package paramserv_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/paramserv/paramserv"
)

// plantedRows is a SparseModel of its own: y = w[k] + b over the rows of
// keys 1..8 of a table and a dense bias, fitted by least squares to the
// planted w[k] = k/4, b = 1 (the example without a key pins b).
type plantedRows struct {
	batches int
	keys    [2][]uint64 // the last two batches' keys (NextBatch's contract)
	final   map[uint64]float32
	finalB  float32
}

const plantedBias = 1

func plantedW(k uint64) float32 { return float32(k) / 4 }

func (*plantedRows) Variables() []paramserv.Variable {
	return []paramserv.Variable{{Name: "b", Shape: []int{1}}}
}

func (*plantedRows) Tables() []paramserv.Table {
	// Admitted on the second touch, initialised from a normal: the
	// declaration a user makes, which the ps honour.
	return []paramserv.Table{{Name: "w", Dim: 1, Init: "normal", InitStddev: 0.1, Seed: 7, MinCount: 2}}
}

func (*plantedRows) Init(int64) paramserv.Params { return paramserv.Params{"b": {0}} }

func (*plantedRows) ComputeGradients(paramserv.Params, paramserv.Params) (float64, error) {
	return 0, errors.New("trained through SparseGradients")
}

func (m *plantedRows) NextBatch() ([][]uint64, error) {
	m.batches++
	i := m.batches % 2
	m.keys[i] = m.keys[i][:0]
	for k := uint64(1); k <= 8; k++ {
		m.keys[i] = append(m.keys[i], k)
	}
	return [][]uint64{m.keys[i]}, nil
}

func (m *plantedRows) SparseGradients(p, g paramserv.Params, rows, rowGrads [][]float32) (float64, error) {
	keys := m.keys[m.batches%2]
	if len(rows[0]) != len(keys) {
		return 0, fmt.Errorf("%d rows for %d keys", len(rows[0]), len(keys))
	}
	b := p["b"][0]
	e0 := b - plantedBias // the example without a key
	loss, gb := float64(e0*e0), 2*e0
	for i, k := range keys {
		e := rows[0][i] + b - (plantedW(k) + plantedBias)
		loss += float64(e * e)
		rowGrads[0][i] = 2 * e / 9
		gb += 2 * e
	}
	g["b"][0] = gb / 9
	return loss / 9, nil
}

func (*plantedRows) Progress(local, global int64, p paramserv.Params, loss float64) string {
	return fmt.Sprintf("step %d: b %.3f, loss %.5f", global, p["b"][0], loss)
}

func (*plantedRows) Evaluate(paramserv.Params) (map[string]float64, error) {
	return nil, errors.New("evaluated through EvaluateSparse")
}

func (m *plantedRows) EvaluateSparse(p paramserv.Params, lookup func(int, []uint64, []float32) error) (map[string]float64, error) {
	keys := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	out := make([]float32, len(keys))
	if err := lookup(0, keys, out); err != nil {
		return nil, err
	}
	m.final, m.finalB = map[uint64]float32{}, p["b"][0]
	var worst float64
	for i, k := range keys {
		m.final[k] = out[i]
		worst = math.Max(worst, math.Abs(float64(out[i]-plantedW(k))))
	}
	return map[string]float64{"worst_row_error": worst, "bias": float64(m.finalB)}, nil
}

// A model of one's own with a sparse table runs in the built-in loop (Run)
// against a ps on a loopback port: the table's rows live on the ps, are
// pulled and pushed with the dense bias, learn the planted values, and are
// in the checkpoints; the result file holds the model's metrics.
func TestRunTrainsASparseModel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := time.AfterFunc(2*time.Minute, func() { cancel(); t.Error("the job did not end within 2 minutes") })
	defer deadline.Stop()

	dir := t.TempDir()
	m := &plantedRows{}
	cfg := paramserv.RunConfig{
		Name:          "planted",
		NewModel:      func(paramserv.ModelConfig) (paramserv.Model, error) { return m, nil },
		Optimizer:     paramserv.Optimizer{Name: "sgd", LearningRate: 0.5},
		Sync:          true,
		TrainSteps:    1500,
		BatchSize:     9,
		CheckpointDir: filepath.Join(dir, "ckpt"),
		SaveSteps:     500,
		ResultFile:    filepath.Join(dir, "result.json"),
		Logf:          t.Logf,
	}
	// run runs a job of one ps and one worker (the ps restoring the
	// newest checkpoint of CheckpointDir, if any) to its end.
	run := func(cfg paramserv.RunConfig) {
		t.Helper()
		var psDone <-chan error
		cfg.TFConfig, psDone = servePS(t, ctx, paramserv.PSConfig{CheckpointDir: cfg.CheckpointDir})
		if err := paramserv.Run(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if err := <-psDone; err != nil {
			t.Fatalf("ps: %v", err)
		}
	}
	run(cfg)

	if m.final == nil {
		t.Fatal("EvaluateSparse was not called")
	}
	for k, w := range m.final {
		if math.Abs(float64(w-plantedW(k))) > 1e-3 {
			t.Errorf("row %d: %.4f, want %.4f", k, w, plantedW(k))
		}
	}
	if math.Abs(float64(m.finalB-plantedBias)) > 1e-3 {
		t.Errorf("bias %.4f, want %d", m.finalB, plantedBias)
	}
	var r struct {
		GlobalStep int64              `json:"global_step"`
		Metrics    map[string]float64 `json:"metrics"`
		Tables     []struct {
			Name     string `json:"name"`
			Rows     int64  `json:"rows"`
			Admitted int64  `json:"admitted"`
		} `json:"tables"`
	}
	b, err := os.ReadFile(cfg.ResultFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("result file: %v\n%s", err, b)
	}
	if r.GlobalStep != cfg.TrainSteps || r.Metrics["worst_row_error"] > 1e-3 {
		t.Errorf("result file: global step %d, metrics %v; want step %d and the rows learned\n%s", r.GlobalStep, r.Metrics, cfg.TrainSteps, b)
	}
	if len(r.Tables) != 1 || r.Tables[0].Rows != 8 {
		t.Errorf("result file: tables %+v, want table w with 8 rows\n%s", r.Tables, b)
	}
	ckpts, _ := filepath.Glob(filepath.Join(cfg.CheckpointDir, "*"))
	if len(ckpts) == 0 {
		t.Fatalf("no checkpoint in %s", cfg.CheckpointDir)
	}

	// A new job on the same checkpoints goes on from the last one: the
	// rows come back learned, and only the remaining steps are trained.
	again := &plantedRows{}
	cfg.NewModel = func(paramserv.ModelConfig) (paramserv.Model, error) { return again, nil }
	cfg.TrainSteps += 50
	run(cfg)
	if again.batches > 60 {
		t.Errorf("the job restored at step 1500 read %d batches to reach step %d, want about 50", again.batches, cfg.TrainSteps)
	}
	for k, w := range again.final {
		if math.Abs(float64(w-plantedW(k))) > 1e-3 {
			t.Errorf("after the restore, row %d: %.4f, want %.4f", k, w, plantedW(k))
		}
	}
}
