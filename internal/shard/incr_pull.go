package shard

import (
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// PullRowsSince is PullRows(name, nil, set, owned, dst) for an incremental
// pull: the worker holds the rows of the keys not marked in lack (a bitmap
// of set.Len() bits, nil for none) at version since of this table (0: it
// holds none). It reads every row into dst as PullRows does (the same
// admission counts), then marks in sel (a bitmap of set.Len() bits) the
// keys whose rows the worker needs: those changed since, and those it
// lacks. It returns how many it marked and the table's version, which the
// worker holds once it has them. The first call turns the table's row
// versions on (8 bytes a row).
func (s *Shard) PullRowsSince(name []byte, set *sparse.KeySet, owned bool, dst []float32, since uint64, lack, sel []uint64) (int, uint64, error) {
	if err := s.PullRows(name, nil, set, owned, dst); err != nil {
		return 0, 0, err
	}
	t := s.st.tables[string(name)].t
	if !t.VersionsEnabled() {
		t.EnableVersions()
		since = 0 // no version of this table was ever handed out
	}
	if since == 0 {
		lack = nil
		for i := range sel {
			sel[i] = ^uint64(0)
		}
		if r := set.Len() & 63; r != 0 {
			sel[len(sel)-1] = 1<<r - 1
		}
		return set.Len(), t.Version(), nil
	}
	n, err := t.ChangedSince(set, since, lack, sel)
	if err != nil {
		return 0, 0, errorf(Invalid, "ps %d: table %q: %w", s.cfg.Task, name, err)
	}
	return n, t.Version(), nil
}
