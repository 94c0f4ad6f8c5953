package checkpoint

import (
	"fmt"
	"path/filepath"

	"github.com/paramserv/paramserv/internal/ckptformat"
	"github.com/paramserv/paramserv/internal/vfs"
)

// Reading a delta chain without applying it. ReadShard applies a chain's
// deltas to its base and returns the whole table in memory; a restore
// into a disk tier instead reads the chain's files as they are (mapped
// where they can be) and streams the rows the deltas leave, which
// ChainRows names, into the tier: the table is never built in memory.

// ReadChain returns the files of shard k of the checkpoint m describes and
// of every checkpoint its chain goes back through: the full base first,
// then the deltas, oldest first, m's last (one shard for a full
// checkpoint), each checked as ReadShardFile checks it and none applied.
// Where fsys opens files with an Fd method the files are mapped, as
// ReadShardMapped maps them: release, which must be called once the
// caller is done with every tensor, unmaps them. On error there is
// nothing to release.
func ReadChain(fsys vfs.FS, dir string, m Manifest, k int) (links []Shard, release func(), err error) {
	if k < 0 || k >= len(m.Shards) {
		return nil, func() {}, fmt.Errorf("%w: shard %d of a %d-shard checkpoint", ErrInvalid, k, len(m.Shards))
	}
	if err := m.Validate(); err != nil {
		return nil, func() {}, err
	}
	ms, err := chain(fsys, dir, m, k, false, verifyOnly)
	if err != nil {
		return nil, func() {}, fmt.Errorf("checkpoint: read %s: %w", filepath.Join(dir, CheckpointName(m.Step)), err)
	}
	var unmaps []func()
	release = func() {
		for _, u := range unmaps {
			u()
		}
		unmaps = nil
	}
	for _, l := range ms {
		cdir := filepath.Join(dir, CheckpointName(l.Step))
		s, unmap, err := readShardMapped(fsys, cdir, l, k, false)
		if err != nil {
			release()
			return nil, func() {}, fmt.Errorf("checkpoint: read %s: %w", cdir, err)
		}
		unmaps = append(unmaps, unmap)
		links = append(links, s)
	}
	return links, release, nil
}

// RowRef is row I of the file Src of a chain (0: its base; j: its j-th
// delta).
type RowRef = ckptformat.RowRef

// ChainRows says which rows of table the chain links (ReadChain's: the
// base, then its deltas oldest first) hold once the deltas are applied,
// as ApplyDelta applies them: every row of the base whose key changed
// reports false (no delta changed or deleted it), then the rows in
// Changed, the newest version of each key a delta wrote and did not
// delete since, in key order. Its memory is that of the deltas' keys, not
// of the base's. A table the base does not hold (not on this shard) has
// no rows.
func ChainRows(links []Shard, table string) (changed func(key uint64) bool, rows []RowRef, err error) {
	if len(links) == 0 {
		return nil, nil, fmt.Errorf("%w: a chain of no files", ErrInvalid)
	}
	base := links[0]
	if _, err := base.Lookup(KeysName(table)); err != nil {
		return func(uint64) bool { return false }, nil, nil
	}
	dts := make([]map[string]Tensor, len(links)-1)
	for i, d := range links[1:] {
		if !d.Delta {
			return nil, nil, fmt.Errorf("%w: link %d of a chain is not a delta", ErrInvalid, i+1)
		}
		dts[i] = d.ByName()
	}
	// The base's keys are not read (they may be most of the table):
	// the deltas' events alone say which of its rows changed.
	keys, del := make([][]uint64, len(links)), make([][]uint64, len(links))
	for j := 1; j < len(links); j++ {
		where := fmt.Sprintf("delta %d", j)
		if keys[j], err = ascendingKeys(where, dts[j-1], KeysName(table)); err != nil {
			return nil, nil, fmt.Errorf("table %q: %w", table, err)
		}
		if del[j], err = ascendingKeys(where, dts[j-1], DeletedName(table)); err != nil {
			return nil, nil, fmt.Errorf("table %q: %w", table, err)
		}
	}
	events := deltaEvents(keys, del)
	touched := make(map[uint64]struct{}, len(events))
	for _, e := range events {
		touched[e.key] = struct{}{}
		if e.src > 0 {
			rows = append(rows, RowRef{Src: e.src, I: e.i})
		}
	}
	return func(key uint64) bool { _, ok := touched[key]; return ok }, rows, nil
}
