package consistency

import "fmt"

// Copy is a tracker's whole state, for a replica's copy of a shard
// (docs/REPLICATION.md, re-replication): Restore of it behaves as the
// tracker it came from.
type Copy struct {
	Step        int64  `json:"step"`
	Contributed []bool `json:"contributed,omitempty"`
	Count       int    `json:"count"`
	Stats       Stats  `json:"stats"`
}

// Copy returns t's state.
func (t *Tracker) Copy() Copy {
	return Copy{Step: t.step, Contributed: append([]bool(nil), t.contributed...), Count: t.count, Stats: t.stats}
}

// Restore makes t's state c (from a tracker of the same Config).
func (t *Tracker) Restore(c Copy) error {
	if len(c.Contributed) != len(t.contributed) {
		return fmt.Errorf("consistency: a copy of %d workers' contributions, this tracker has %d workers", len(c.Contributed), len(t.contributed))
	}
	n := 0
	for _, v := range c.Contributed {
		if v {
			n++
		}
	}
	if n != c.Count {
		return fmt.Errorf("consistency: a copy counting %d contributions, %d marked", c.Count, n)
	}
	t.step, t.count, t.stats = c.Step, c.Count, c.Stats
	copy(t.contributed, c.Contributed)
	return nil
}
