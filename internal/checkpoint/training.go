package checkpoint

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The Meta keys that hold a Training's fields.
const (
	metaReplicas     = "replicas_to_aggregate"
	metaMaxStaleness = "max_staleness"
	metaSplitBytes   = "split_bytes"
	metaSyncTimeout  = "sync_timeout_ms"
	metaSyncProceed  = "sync_proceed"
	metaTables       = "tables"
	metaVarOptims    = "var_optimizers"
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
