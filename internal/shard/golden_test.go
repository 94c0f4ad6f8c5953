package shard

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/ckptformat"
	"github.com/paramserv/paramserv/internal/vfs"
)

// goldenDir holds checkpoints written by the code of before the shard
// existed (package checkpoint's golden-v1, made with today's main).
const goldenDir = "../checkpoint/testdata/golden-v1"

// goldenV4Dir holds checkpoints whose tables' keys are in the order a ps's
// memory held them (format version 4), and a delta on one.
const goldenV4Dir = "../checkpoint/testdata/golden-v4"

// Checkpoints written by earlier code still load: restored onto as many
// ps as wrote them, onto fewer and onto more (re-sharding), every ps's
// shard together holds exactly the golden tensors, bit for bit: values,
// optimizer slots, rows by key, and the step.
func TestGoldenCheckpointsRestore(t *testing.T) {
	for _, c := range []struct {
		dir  string
		step int64
	}{{goldenDir, 100}, {goldenDir, 200}, {goldenV4Dir, 300}, {goldenV4Dir, 310}, {goldenV5Dir, goldenV5Step}} {
		goldenDir, step := c.dir, c.step
		m, err := checkpoint.Load(vfs.OS, goldenDir, step)
		if err != nil {
			t.Fatal(err)
		}
		want := goldenTensors(t, goldenDir, m)
		// Last-touched steps outside 0..step (the golden files hold
		// extremes on purpose) are restored within it.
		for name, b := range want {
			if strings.HasSuffix(name, "/last_touch") {
				v := int64(binary.LittleEndian.Uint64(b))
				want[name] = binary.LittleEndian.AppendUint64(nil, uint64(min(max(v, 0), step)))
			}
		}
		for _, numPS := range []int{m.NumPS, 1, 3} {
			t.Run(fmt.Sprintf("step%d/ps%d", step, numPS), func(t *testing.T) {
				got := map[string][]byte{}
				for task := range numPS {
					read := func(k int) (*checkpoint.Shard, error) {
						sh, err := checkpoint.ReadShard(vfs.OS, goldenDir, m, k)
						return &sh, err
					}
					st, err := Restore(contentsOf(m), read, task, numPS, m.NumWorkers, testRunner)
					if err != nil {
						t.Fatal(err)
					}
					sh := New(Config{Task: task, NumPS: numPS, NumWorkers: m.NumWorkers})
					sh.Install(st)
					if sh.Step() != step || sh.RestoredStep() != step {
						t.Fatalf("ps %d: step %d (restored %d), want %d", task, sh.Step(), sh.RestoredStep(), step)
					}
					collect(t, sh.Snapshot(), got)
				}
				for name, w := range want {
					if !bytes.Equal(got[name], w) {
						t.Errorf("%s: restored %x, golden %x", name, got[name], w)
					}
				}
				if len(got) != len(want) {
					t.Errorf("restored %d tensors and rows, golden %d", len(got), len(want))
				}
			})
		}
	}
}

// goldenTensors reads the checkpoint's files as they are: each variable's
// tensors with its parts in row order, each table's rows by key.
func goldenTensors(t *testing.T, goldenDir string, m checkpoint.Manifest) map[string][]byte {
	out := map[string][]byte{}
	for k := range m.Shards {
		sh, err := checkpoint.ReadShard(vfs.OS, goldenDir, m, k)
		if err != nil {
			t.Fatal(err)
		}
		collect(t, sh, out)
	}
	return out
}

// collect adds a shard's tensors to out: a variable's tensors appended in
// the order of the shards given (row order), a table's per key.
func collect(t *testing.T, sh checkpoint.Shard, out map[string][]byte) {
	byName := sh.ByName()
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		tn := byName[n]
		table, col, ok := cutTable(n)
		if !ok {
			out[n] = append(out[n], tn.Data...)
			continue
		}
		if col == "keys" || col == "index" { // the index: how the rows were found, not rows
			continue
		}
		keys, err := sh.Uint64s(table + "/keys")
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			continue
		}
		per := len(tn.Data) / len(keys)
		for i, k := range keys {
			out[fmt.Sprintf("%s[%d]/%s", table, k, col)] = tn.Data[i*per : (i+1)*per]
		}
	}
}

// cutTable splits "emb/values" into the table and its column; the golden
// checkpoints' only tables are emb (golden-v1, golden-v5) and w (golden-v4).
func cutTable(name string) (table, col string, ok bool) {
	for _, table := range []string{"emb", "w"} {
		if col, ok := strings.CutPrefix(name, table+"/"); ok && col != "" {
			return table, col, true
		}
	}
	return "", "", false
}

// contentsOf is m's contents, as the server reads them before Restore.
func contentsOf(m checkpoint.Manifest) ckptformat.Contents {
	c, err := m.Contents()
	if err != nil {
		panic(fmt.Sprintf("manifest of step %d: %v", m.Step, err))
	}
	return c
}
