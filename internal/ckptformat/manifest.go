package ckptformat

import (
	"time"

	"github.com/paramserv/paramserv/internal/optim"
)

// VariableInfo places a dense variable. Its values are the tensor named
// Name, and each slot the tensor SlotName(Name, slot), in the shards its
// parts name.
type VariableInfo struct {
	Name  string  `json:"name"`
	Shape []int64 `json:"shape"`
	// Slots names the optimizer state tensors ("adam_m", "adam_v").
	Slots []string `json:"slots,omitempty"`
	// Parts says which shards hold the variable: one part without Rows
	// for a variable placed whole on one server, or several with Rows
	// for one split along its first dimension.
	Parts []Part `json:"parts"`
}

// Part is the piece of a variable one shard holds.
type Part struct {
	Shard int `json:"shard"`
	// Rows is the [begin, end) range of the variable's first dimension
	// this part holds; nil for the whole variable.
	Rows []int64 `json:"rows,omitempty"`
}

// TableInfo places a sparse table. Each shard in Shards holds the rows
// whose keys hash to it, as the tensors KeysName(Name) (U64 [n]),
// ValuesName(Name) (F32 [n, Dim]) and SlotName(Name, slot) ([n, ...]) for
// each slot.
type TableInfo struct {
	Name string `json:"name"`
	Dim  int64  `json:"dim"`
	// Slots names the per-row state tensors besides keys and values:
	// optimizer state ("adagrad") and per-row counters ("updates").
	Slots  []string `json:"slots,omitempty"`
	Shards []int    `json:"shards"`
}

// Training is what a manifest records of how the job trains, typed: the
// mode, the optimizer, the consistency settings and the sparse tables'
// specifications. A ps restoring a checkpoint builds its shard from it.
//
// On disk it lives where every checkpoint since format version 1 keeps
// it, so old checkpoints load and old readers read new ones: Mode and
// Optimizer in their own manifest fields, the rest in Meta under the keys
// below (numbers as decimal strings, the tables as a JSON array). Read it
// with checkpoint.Manifest.Training and write it with
// checkpoint.Manifest.SetTraining, never
// through Meta.
type Training struct {
	Mode                string // "sync" or "async"
	Optimizer           optim.Config
	ReplicasToAggregate int   // sync: gradients averaged per step
	MaxStaleness        int64 // async: 0 = no bound
	SplitBytes          int64 // the placement threshold the workers used
	SyncTimeout         time.Duration
	SyncProceed         bool
	Tables              []TableSpec
	// VarOptimizers holds the update rules of the variables that have
	// their own, by variable name; the others use Optimizer. It is in Meta
	// under "var_optimizers" (a JSON object), absent when empty, so a
	// checkpoint without per-variable rules is written as before.
	VarOptimizers map[string]*optim.Config
}

// TableSpec is a sparse table's specification as manifests record it.
type TableSpec struct {
	Name            string  `json:"name,omitempty"`
	Dim             int32   `json:"dim,omitempty"`
	Initializer     string  `json:"initializer,omitempty"` // "zeros" (or "") or "normal"
	InitStddev      float64 `json:"init_stddev,omitempty"`
	Seed            uint64  `json:"seed,omitempty"`
	MinCount        int64   `json:"min_count,omitempty"` // admission threshold; 0 admits at once
	EvictAfterSteps int64   `json:"evict_after_steps,omitempty"`
	// Optimizer is the table's own update rule; nil (absent): the job's.
	Optimizer *optim.Config `json:"optimizer,omitempty"`
}

// Contents is what a checkpoint holds, as a ps that restores it reads it
// (checkpoint.Manifest.Contents): its step, the shape of the cluster that
// wrote it, where each variable and table lives, and the training record.
type Contents struct {
	Step      int64
	NumPS     int // the ps that wrote it
	NumShards int // its shard files, one per ps
	Variables []VariableInfo
	Tables    []TableInfo
	Training  Training
}
