package checkpoint_test

import (
	"fmt"
	"log"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/vfs"
)

// A two-server job saves a checkpoint and restores it. Each server writes
// its own shard; the chief writes the manifest from their ShardInfos; on
// restart, Latest finds the newest intact checkpoint and each server reads
// its shard back. Use vfs.OS for the real disk.
func Example() {
	fsys := vfs.NewMem()
	const dir, step = "ckpts", 100

	// On each parameter server k: its dense variables with their
	// optimizer state, and its rows of the sparse tables.
	shards := []checkpoint.Shard{{
		Step: step,
		Tensors: []checkpoint.Tensor{
			checkpoint.Float32Tensor("hid_w", []int64{2, 2}, []float32{0.1, -0.2, 0.3, -0.4}),
			checkpoint.Float32Tensor("hid_w/momentum", []int64{2, 2}, []float32{0, 0, 0, 0}),
		},
	}, {
		Step: step,
		Tensors: []checkpoint.Tensor{
			checkpoint.Uint64Tensor("emb/keys", []int64{2}, []uint64{17, 42}),
			checkpoint.Float32Tensor("emb/values", []int64{2, 3}, []float32{1, 2, 3, 4, 5, 6}),
		},
	}}
	var infos []checkpoint.ShardInfo
	for k, s := range shards {
		info, err := checkpoint.WriteShard(fsys, dir, step, k, len(shards), s)
		if err != nil {
			log.Fatal(err)
		}
		infos = append(infos, info) // sent to the chief
	}

	// On the chief, once every shard has reported.
	err := checkpoint.WriteManifest(fsys, dir, checkpoint.Manifest{
		Step:       step,
		Time:       time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC),
		Mode:       "sync",
		NumPS:      2,
		NumWorkers: 3,
		Optimizer:  []byte(`{"name":"momentum","learning_rate":0.1,"momentum":0.9}`),
		Shards:     infos,
		Variables: []checkpoint.VariableInfo{{
			Name: "hid_w", Shape: []int64{2, 2}, Slots: []string{"momentum"},
			Parts: []checkpoint.Part{{Shard: 0}},
		}},
		Tables: []checkpoint.TableInfo{{Name: "emb", Dim: 3, Shards: []int{1}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := checkpoint.Prune(fsys, dir, checkpoint.DefaultKeep); err != nil {
		log.Fatal(err)
	}

	// On restart.
	m, skipped, err := checkpoint.Latest(fsys, dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range skipped {
		log.Printf("%v; using %s", s, checkpoint.CheckpointName(m.Step))
	}
	s, err := checkpoint.ReadShard(fsys, dir, m, 1)
	if err != nil {
		log.Fatal(err)
	}
	keys, _ := s.Uint64s(checkpoint.KeysName("emb"))
	values, _ := s.Float32s(checkpoint.ValuesName("emb"))
	fmt.Println("step", m.Step, "mode", m.Mode, "rows", m.Rows("emb"))
	fmt.Println(keys, values)
	// Output:
	// step 100 mode sync rows 2
	// [17 42] [1 2 3 4 5 6]
}
