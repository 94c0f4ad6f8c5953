package checkpoint

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/vfs"
)

// The golden checkpoints, written by the code of before Training existed,
// read as the typed record they mean.
func TestTrainingOfGoldenCheckpoints(t *testing.T) {
	want := map[int64]Training{
		100: {
			Mode:         "async",
			Optimizer:    optim.Config{Name: "ftrl", LearningRate: 0.05, InitialAccumulator: 0.1, FTRLBeta: 1, L1: 0.001, L2: 0.0001},
			MaxStaleness: 50, SplitBytes: 1 << 20,
			Tables: []TableSpec{{Name: "emb", Dim: 2, Initializer: "normal", InitStddev: 0.01, Seed: 7, EvictAfterSteps: 1000}},
		},
		200: {
			Mode:                "sync",
			Optimizer:           optim.Config{Name: "adam", LearningRate: 0.001, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8},
			ReplicasToAggregate: 2, SplitBytes: 16, SyncTimeout: time.Minute, SyncProceed: true,
			Tables: []TableSpec{{Name: "emb", Dim: 2, Seed: 1, MinCount: 2}},
		},
	}
	for step, w := range want {
		m, err := Load(vfs.OS, goldenDir, step)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Training()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("step %d: Training() = %+v, want %+v", step, got, w)
		}
		// Written back, it reads the same and leaves the meta as it was.
		var m2 Manifest
		if err := m2.SetTraining(got); err != nil {
			t.Fatal(err)
		}
		back, err := m2.Training()
		if err != nil || !reflect.DeepEqual(back, w) {
			t.Errorf("step %d: round trip = %+v, %v", step, back, err)
		}
		if !reflect.DeepEqual(m2.Meta, m.Meta) {
			t.Errorf("step %d: SetTraining wrote meta %v, the checkpoint has %v", step, m2.Meta, m.Meta)
		}
	}
}

func TestTrainingRefusesMalformedFields(t *testing.T) {
	for key, val := range map[string]string{
		"replicas_to_aggregate": "two", "max_staleness": "1.5", "sync_timeout_ms": "x",
		"sync_proceed": "yes", "tables": "[{", "split_bytes": "9999999999999999999999",
		"var_optimizers": `{"w":null}`,
	} {
		m := Manifest{Step: 7, Meta: map[string]string{key: val}}
		if _, err := m.Training(); err == nil || !strings.Contains(err.Error(), "step 7") {
			t.Errorf("meta %s=%q: %v, want an error naming the checkpoint", key, val, err)
		}
	}
}

// Per-variable and per-table rules survive the manifest; a record without
// them writes no var_optimizers key (TestTrainingOfGoldenCheckpoints: the
// meta of old checkpoints is written back unchanged).
func TestTrainingKeepsOwnRules(t *testing.T) {
	adam := optim.Config{Name: "adam", LearningRate: 0.003}
	ftrl := optim.Config{Name: "ftrl", LearningRate: 0.1, L1: 0.01}
	want := Training{
		Mode: "async", Optimizer: optim.Config{Name: "sgd", LearningRate: 0.5},
		Tables:        []TableSpec{{Name: "emb", Dim: 8, Optimizer: &ftrl}, {Name: "wide", Dim: 1}},
		VarOptimizers: map[string]*optim.Config{"hid_w": &adam, "hid_b": &adam},
	}
	var m Manifest
	if err := m.SetTraining(want); err != nil {
		t.Fatal(err)
	}
	if m.Meta["var_optimizers"] == "" || !strings.Contains(m.Meta["tables"], `"optimizer"`) {
		t.Fatalf("meta %v records no per-variable or per-table rule", m.Meta)
	}
	got, err := m.Training()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip = %+v, %v; want %+v", got, err, want)
	}
	want.VarOptimizers, want.Tables = nil, []TableSpec{{Name: "wide", Dim: 1}}
	if err := m.SetTraining(want); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Meta["var_optimizers"]; ok || strings.Contains(m.Meta["tables"], "optimizer") {
		t.Fatalf("a record without own rules left them in the meta: %v", m.Meta)
	}
}
