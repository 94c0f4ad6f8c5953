package checkpoint

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
)

// Training is what a manifest records of how the job trains, typed: the
// mode, the optimizer, the consistency settings and the sparse tables'
// specifications. A ps restoring a checkpoint builds its shard from it.
//
// On disk it lives where every checkpoint since format version 1 keeps
// it, so old checkpoints load and old readers read new ones: Mode and
// Optimizer in their own manifest fields, the rest in Meta under the keys
// below (numbers as decimal strings, the tables as a JSON array). Read it
// with Manifest.Training and write it with Manifest.SetTraining, never
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
	// GoalStep is the job's goal (--train_steps) when the checkpoint was
	// written; 0: not known. A checkpoint at or past its goal is the
	// job's final one: a ps that restores it knows the job had ended. It
	// is in Meta under "goal_step", absent when 0.
	GoalStep int64
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

// The Meta keys that hold a Training's fields.
const (
	metaReplicas     = "replicas_to_aggregate"
	metaMaxStaleness = "max_staleness"
	metaSplitBytes   = "split_bytes"
	metaSyncTimeout  = "sync_timeout_ms"
	metaSyncProceed  = "sync_proceed"
	metaTables       = "tables"
	metaVarOptims    = "var_optimizers"
	metaGoalStep     = "goal_step"
)

// Training reads the manifest's training record. A field a manifest lacks
// is zero; a field present but malformed is an error naming it.
func (m Manifest) Training() (Training, error) {
	t := Training{Mode: m.Mode}
	if len(m.Optimizer) > 0 {
		if err := json.Unmarshal(m.Optimizer, &t.Optimizer); err != nil {
			return Training{}, fmt.Errorf("checkpoint of step %d: optimizer %s: %w", m.Step, m.Optimizer, err)
		}
	}
	num := func(key string) (int64, error) {
		s, ok := m.Meta[key]
		if !ok || s == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("checkpoint of step %d: meta %s=%q: want an integer", m.Step, key, s)
		}
		return n, nil
	}
	var err error
	var r, ms int64
	if r, err = num(metaReplicas); err != nil {
		return Training{}, err
	}
	t.ReplicasToAggregate = int(r)
	if t.MaxStaleness, err = num(metaMaxStaleness); err != nil {
		return Training{}, err
	}
	if t.SplitBytes, err = num(metaSplitBytes); err != nil {
		return Training{}, err
	}
	if ms, err = num(metaSyncTimeout); err != nil {
		return Training{}, err
	}
	t.SyncTimeout = time.Duration(ms) * time.Millisecond
	if t.GoalStep, err = num(metaGoalStep); err != nil {
		return Training{}, err
	}
	if t.GoalStep < 0 {
		return Training{}, fmt.Errorf("checkpoint of step %d: meta %s=%d: want 0 or more", m.Step, metaGoalStep, t.GoalStep)
	}
	switch s := m.Meta[metaSyncProceed]; s {
	case "", "false":
	case "true":
		t.SyncProceed = true
	default:
		return Training{}, fmt.Errorf("checkpoint of step %d: meta %s=%q: want true or false", m.Step, metaSyncProceed, s)
	}
	if s := m.Meta[metaTables]; s != "" {
		if err := json.Unmarshal([]byte(s), &t.Tables); err != nil {
			return Training{}, fmt.Errorf("checkpoint of step %d: table specs: %w", m.Step, err)
		}
	}
	if s := m.Meta[metaVarOptims]; s != "" {
		if err := json.Unmarshal([]byte(s), &t.VarOptimizers); err != nil {
			return Training{}, fmt.Errorf("checkpoint of step %d: meta %s: %w", m.Step, metaVarOptims, err)
		}
		for name, o := range t.VarOptimizers {
			if o == nil {
				return Training{}, fmt.Errorf("checkpoint of step %d: meta %s: variable %q has a null rule, want an optimizer", m.Step, metaVarOptims, name)
			}
		}
	}
	return t, nil
}

// SetTraining records t in the manifest, as Training reads it back.
func (m *Manifest) SetTraining(t Training) error {
	opt, err := json.Marshal(t.Optimizer)
	if err != nil {
		return err
	}
	m.Mode, m.Optimizer = t.Mode, opt
	if m.Meta == nil {
		m.Meta = map[string]string{}
	}
	m.Meta[metaReplicas] = strconv.Itoa(t.ReplicasToAggregate)
	m.Meta[metaMaxStaleness] = strconv.FormatInt(t.MaxStaleness, 10)
	m.Meta[metaSplitBytes] = strconv.FormatInt(t.SplitBytes, 10)
	m.Meta[metaSyncTimeout] = strconv.FormatInt(t.SyncTimeout.Milliseconds(), 10)
	m.Meta[metaSyncProceed] = strconv.FormatBool(t.SyncProceed)
	delete(m.Meta, metaTables)
	if len(t.Tables) > 0 {
		b, err := json.Marshal(t.Tables)
		if err != nil {
			return err
		}
		m.Meta[metaTables] = string(b)
	}
	delete(m.Meta, metaGoalStep)
	if t.GoalStep > 0 {
		m.Meta[metaGoalStep] = strconv.FormatInt(t.GoalStep, 10)
	}
	delete(m.Meta, metaVarOptims)
	if len(t.VarOptimizers) > 0 {
		b, err := json.Marshal(t.VarOptimizers)
		if err != nil {
			return err
		}
		m.Meta[metaVarOptims] = string(b)
	}
	return nil
}
