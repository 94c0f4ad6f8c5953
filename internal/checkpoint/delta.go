package checkpoint

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/paramserv/paramserv/internal/ckptformat"
	"github.com/paramserv/paramserv/internal/vfs"
)

// Incremental checkpoints.
//
// A delta checkpoint (Manifest.Kind KindDelta) records in Parent the
// checkpoint its deltas apply to, and in Base the full checkpoint its chain
// starts from. Its shards are deltas (ShardInfo.Delta), or full shards where
// a server could not take a delta (it restarted, or lost track of its
// evictions): a shard's chain ends at the first full shard met going back.
// ReadShard follows the chain and applies the deltas in order, oldest
// first, so that the shard it returns is, tensor for tensor and byte for
// byte, the one a full checkpoint at the same cut would hold.
//
// A checkpoint is valid only when its whole chain is: Latest, Load, List
// and Prune check every link, and a checkpoint whose chain is broken is
// reported with ErrChain (and set aside by LatestSetAside, so the job can
// save again at its step). Prune keeps every checkpoint a kept one needs.

// chain returns the manifests of the checkpoints shard k of m is built
// from, base first and m last. Each link's manifest is read and checked
// (its shard k in full, in mode, when verify: a parent is held to what the
// checkpoint itself is, finite values included); errors wrap ErrChain and
// name the broken link.
func chain(fsys vfs.FS, dir string, m Manifest, k int, verify bool, mode readMode) ([]Manifest, error) {
	links := []Manifest{m}
	for cur := m; cur.Shards[k].Delta; {
		parent := cur.Shards[k].Parent
		if len(links) > 1<<16 {
			return nil, errorf(ErrChain, "%s: chain longer than %d links", CheckpointName(m.Step), 1<<16)
		}
		p, err := link(fsys, dir, parent, len(m.Shards), verify, mode, k)
		if err != nil {
			return nil, errorf(ErrChain, "%s is a delta of %s, which is %s", CheckpointName(cur.Step), CheckpointName(parent), brokenBecause(err))
		}
		links = append(links, p)
		cur = p
	}
	slices.Reverse(links)
	return links, nil
}

// link reads the manifest of the checkpoint at step, a parent in a chain,
// and checks it has n shards and (verify) that shard k is intact, read in
// mode.
func link(fsys vfs.FS, dir string, step int64, n int, verify bool, mode readMode, k int) (Manifest, error) {
	cdir := filepath.Join(dir, CheckpointName(step))
	m, err := readManifest(fsys, cdir, step)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := fsys.Stat(cdir); serr != nil {
			return Manifest{}, errorf(fs.ErrNotExist, "missing")
		}
		return Manifest{}, errorf(ErrIncomplete, "no %s", ManifestName)
	}
	if err != nil {
		return Manifest{}, err
	}
	if len(m.Shards) != n {
		return Manifest{}, errorf(ErrMismatch, "a checkpoint of %d shards, not %d", len(m.Shards), n)
	}
	if verify {
		if _, err := readShard(fsys, cdir, m, k, mode); err != nil {
			return Manifest{}, err
		}
	} else if err := statShard(fsys, cdir, m.Shards[k]); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// brokenBecause phrases why a link is unusable: "missing", "incomplete: no
// manifest.json", "damaged: shard-0-of-2.safetensors: checksum mismatch...".
func brokenBecause(err error) string {
	if errors.Is(err, fs.ErrNotExist) && !strings.Contains(err.Error(), ".safetensors") {
		return "missing"
	}
	return status(err)
}

// statShard checks that a shard file is there with its recorded size.
func statShard(fsys vfs.FS, cdir string, s ShardInfo) error {
	fi, err := fsys.Stat(filepath.Join(cdir, s.File))
	if err != nil {
		return fileError(s.File, err)
	}
	if fi.Size() != s.Size {
		return errorf(ErrSize, "%s: %d bytes on disk, manifest says %d", s.File, fi.Size(), s.Size)
	}
	return nil
}

// checkChain checks the chains of every shard of m (see chain).
func checkChain(fsys vfs.FS, dir string, m Manifest, verify bool, mode readMode) error {
	if !m.IsDelta() {
		return nil
	}
	for k := range m.Shards {
		if _, err := chain(fsys, dir, m, k, verify, mode); err != nil {
			return err
		}
	}
	return nil
}

// ReadShard returns shard k of the checkpoint m describes, from
// dir/ckpt-<m.Step>: the whole state of shard k at its cut. For a full
// checkpoint it is ReadShardFile. For a delta it reads the shard's chain
// back to its base, every file checked as ReadShardFile checks it, and
// applies the deltas in order; the result is what a full checkpoint at the
// same cut would hold, with Delta false.
func ReadShard(fsys vfs.FS, dir string, m Manifest, k int) (Shard, error) {
	if k < 0 || k >= len(m.Shards) || !m.Shards[k].Delta {
		return ReadShardFile(fsys, dir, m, k)
	}
	if err := m.Validate(); err != nil {
		return Shard{}, err
	}
	links, err := chain(fsys, dir, m, k, false, verifyOnly)
	if err != nil {
		return Shard{}, fmt.Errorf("checkpoint: read %s: %w", filepath.Join(dir, CheckpointName(m.Step)), err)
	}
	base, err := ReadShardFile(fsys, dir, links[0], k)
	if err != nil {
		return Shard{}, err
	}
	var ds []Shard
	for _, l := range links[1:] {
		d, err := ReadShardFile(fsys, dir, l, k)
		if err != nil {
			return Shard{}, err
		}
		ds = append(ds, d)
	}
	s, err := applyDeltas(base, ds, m.Tables)
	if err != nil {
		return Shard{}, fmt.Errorf("checkpoint: read %s: applying the deltas since %s: %w", filepath.Join(dir, CheckpointName(m.Step)), CheckpointName(links[0].Step), err)
	}
	return s, nil
}

// ApplyDelta returns base with the delta d applied, for the sparse tables
// the delta's manifest lists: a tensor of d that is not a table's replaces
// (or adds) the one of the same name; a table's rows are base's, less
// those whose keys d deletes, with d's rows replacing or adding theirs, in
// ascending key order (where base's keys are in any order, base's rows in
// its order, each where it was, and then the keys d adds, in key order:
// the result's AnyOrder is base's), in every per-row tensor of the table
// ("<table>/..."); Meta is base's overlaid with d's. base and d are not
// changed.
func ApplyDelta(base, d Shard, tables []TableInfo) (Shard, error) {
	return applyDeltas(base, []Shard{d}, tables)
}

// applyDeltas applies the deltas ds, oldest first, to base in one pass:
// each row is copied once, from the newest shard that has it.
func applyDeltas(base Shard, ds []Shard, tables []TableInfo) (Shard, error) {
	if len(ds) == 0 {
		return Shard{}, fmt.Errorf("%w: no delta to apply", ErrInvalid)
	}
	for _, d := range ds {
		if !d.Delta {
			return Shard{}, fmt.Errorf("%w: applying a shard that is not a delta", ErrInvalid)
		}
	}
	last := ds[len(ds)-1]
	// A table's saved index (IndexName) holds for the base's rows only:
	// the result has none.
	out := Shard{Step: last.Step, Meta: map[string]string{}, AnyOrder: base.AnyOrder}
	for _, s := range append([]Shard{base}, ds...) {
		for k, v := range s.Meta {
			out.Meta[k] = v
		}
	}
	dropIndexMeta(out.Meta, tables)
	dts := make([]map[string]Tensor, len(ds))
	for i, d := range ds {
		dts[i] = d.ByName()
	}
	isTable := map[string]bool{}
	for _, tb := range tables {
		isTable[tb.Name] = true
	}
	tableOf := func(name string) string {
		if i := strings.LastIndexByte(name, '/'); i > 0 && isTable[name[:i]] {
			return name[:i]
		}
		return ""
	}
	merged := map[string]map[string]Tensor{}
	for _, tb := range tables {
		if _, ok := dts[0][KeysName(tb.Name)]; !ok {
			continue // the table is not on this shard
		}
		m, err := mergeTable(base, dts, tb.Name)
		if err != nil {
			return Shard{}, fmt.Errorf("table %q: %w", tb.Name, err)
		}
		merged[tb.Name] = m
	}
	// newest is the newest version of a dense tensor.
	newest := func(name string) (Tensor, bool) {
		for i := len(dts) - 1; i >= 0; i-- {
			if t, ok := dts[i][name]; ok {
				return t, true
			}
		}
		return Tensor{}, false
	}
	seen := map[string]bool{}
	for _, t := range base.Tensors {
		seen[t.Name] = true
		if tb := tableOf(t.Name); tb != "" && t.Name == IndexName(tb) {
			continue
		}
		if tb := tableOf(t.Name); tb != "" && merged[tb] != nil {
			out.Tensors = append(out.Tensors, merged[tb][t.Name])
			continue
		}
		if n, ok := newest(t.Name); ok {
			if n.DType != t.DType {
				return Shard{}, fmt.Errorf("%w: %q is %s in a delta, %s in its base", ErrMismatch, t.Name, n.DType, t.DType)
			}
			t = n
		}
		out.Tensors = append(out.Tensors, t)
	}
	for _, d := range ds {
		for _, t := range d.Tensors {
			if !seen[t.Name] && tableOf(t.Name) == "" {
				seen[t.Name] = true
				n, _ := newest(t.Name)
				out.Tensors = append(out.Tensors, n)
			}
		}
	}
	return out, nil
}

// mergeTable applies the deltas' rows of table to base's.
func mergeTable(base Shard, dts []map[string]Tensor, table string) (map[string]Tensor, error) {
	bt := map[string]Tensor{}
	for _, t := range base.Tensors {
		if strings.HasPrefix(t.Name, table+"/") && t.Name != IndexName(table) {
			bt[t.Name] = t
		}
	}
	keys, del, err := tableKeys(bt, dts, table, base.AnyOrder)
	if err != nil {
		return nil, err
	}
	var rows []rowSource
	if base.AnyOrder {
		rows = mergedRowsAnyOrder(keys[0], deltaEvents(keys, del))
	} else {
		rows = mergedRows(keys[0], deltaEvents(keys, del))
	}
	out := map[string]Tensor{}
	for name, b := range bt {
		t, err := mergeTensor(name, b, dts, keys, rows)
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}

// tableKeys reads table's keys in the base tensors (source 0) and in each
// delta (source j is dts[j-1]), and the keys each delta deleted. The
// base's keys ascend unless anyOrder; the deltas' always do.
func tableKeys(bt map[string]Tensor, dts []map[string]Tensor, table string, anyOrder bool) (keys, del [][]uint64, err error) {
	n := len(dts)
	keys, del = make([][]uint64, n+1), make([][]uint64, n+1)
	if anyOrder {
		t, ok := bt[KeysName(table)]
		if !ok {
			return nil, nil, fmt.Errorf("%w: no %q in the base", ErrNoTensor, KeysName(table))
		}
		if keys[0], err = t.Uint64s(); err != nil {
			return nil, nil, fmt.Errorf("base %q: %w", KeysName(table), err)
		}
	} else if keys[0], err = ascendingKeys("base", bt, KeysName(table)); err != nil {
		return nil, nil, err
	}
	for j := 1; j <= n; j++ {
		where := fmt.Sprintf("delta %d", j)
		if keys[j], err = ascendingKeys(where, dts[j-1], KeysName(table)); err != nil {
			return nil, nil, err
		}
		if del[j], err = ascendingKeys(where, dts[j-1], DeletedName(table)); err != nil {
			return nil, nil, err
		}
	}
	return keys, del, nil
}

// ascendingKeys reads the key tensor name of where (the base or a delta),
// which must be strictly ascending.
func ascendingKeys(where string, m map[string]Tensor, name string) ([]uint64, error) {
	t, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("%w: no %q in the %s", ErrNoTensor, name, where)
	}
	k, err := t.Uint64s()
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", where, name, err)
	}
	for i := 1; i < len(k); i++ {
		if k[i] <= k[i-1] {
			return nil, fmt.Errorf("%w: %s %q: keys not strictly ascending at %d", ErrFormat, where, name, i)
		}
	}
	return k, nil
}

// rowSource is where a merged row comes from: row i of source src (0:
// base; j: delta j), or src -1 where it was deleted.
type rowSource struct {
	src int32
	i   int32
}

// rowEvent is the newest change of a key in the deltas.
type rowEvent struct {
	key uint64
	rowSource
}

// deltaEvents merges the deltas' keys and deleted keys (sources 1..n of
// keys and del) into one event per key, in key order, each key's newest
// winning: a delta's row, or its deletion (a delta deletes before it
// adds).
func deltaEvents(keys, del [][]uint64) []rowEvent {
	n := len(keys) - 1
	var events []rowEvent
	pos, dpos := make([]int, n+1), make([]int, n+1)
	for {
		var k uint64
		found := false
		for s := 1; s <= n; s++ {
			if pos[s] < len(keys[s]) && (!found || keys[s][pos[s]] < k) {
				k, found = keys[s][pos[s]], true
			}
			if dpos[s] < len(del[s]) && (!found || del[s][dpos[s]] < k) {
				k, found = del[s][dpos[s]], true
			}
		}
		if !found {
			return events
		}
		e := rowEvent{key: k, rowSource: rowSource{src: -1}}
		for s := n; s >= 1; s-- {
			if pos[s] < len(keys[s]) && keys[s][pos[s]] == k {
				e.rowSource = rowSource{int32(s), int32(pos[s])}
				break
			}
			if dpos[s] < len(del[s]) && del[s][dpos[s]] == k {
				break // deleted
			}
		}
		events = append(events, e)
		for s := 1; s <= n; s++ {
			if pos[s] < len(keys[s]) && keys[s][pos[s]] == k {
				pos[s]++
			}
			if dpos[s] < len(del[s]) && del[s][dpos[s]] == k {
				dpos[s]++
			}
		}
	}
}

// mergedRows is the rows of the result, in key order: one pass over the
// base's keys, the deltas' events (small: the rows that changed)
// replacing or removing them.
func mergedRows(bk []uint64, events []rowEvent) []rowSource {
	rows := make([]rowSource, 0, len(bk)+len(events))
	for i, o := 0, 0; i < len(bk) || o < len(events); {
		switch {
		case o == len(events) || (i < len(bk) && bk[i] < events[o].key):
			rows = append(rows, rowSource{0, int32(i)})
			i++
			continue
		case i < len(bk) && bk[i] == events[o].key:
			i++
		}
		if events[o].src > 0 {
			rows = append(rows, events[o].rowSource)
		}
		o++
	}
	return rows
}

// mergedRowsAnyOrder is mergedRows for a base whose keys are in any
// order: the base's rows in its order, each replaced or removed where an
// event has its key, then the events' keys the base lacks, in key order.
func mergedRowsAnyOrder(bk []uint64, events []rowEvent) []rowSource {
	rows := make([]rowSource, 0, len(bk)+len(events))
	if len(events) == 0 {
		for i := range bk {
			rows = append(rows, rowSource{0, int32(i)})
		}
		return rows
	}
	at := make(map[uint64]int, len(events))
	for o, e := range events {
		at[e.key] = o
	}
	inBase := make([]bool, len(events))
	for i, k := range bk {
		o, ok := at[k]
		if !ok {
			rows = append(rows, rowSource{0, int32(i)})
			continue
		}
		inBase[o] = true
		if events[o].src > 0 {
			rows = append(rows, events[o].rowSource)
		}
	}
	for o, e := range events {
		if !inBase[o] && e.src > 0 {
			rows = append(rows, e.rowSource)
		}
	}
	return rows
}

// mergeTensor builds the merged tensor name (base b, and the same name in
// each delta, of keys[j] rows each) from rows.
func mergeTensor(name string, b Tensor, dts []map[string]Tensor, keys [][]uint64, rows []rowSource) (Tensor, error) {
	n := len(dts)
	if len(b.Shape) == 0 || b.Shape[0] != int64(len(keys[0])) {
		return Tensor{}, fmt.Errorf("%w: %q has shape %v in the base, for %d keys", ErrMismatch, name, b.Shape, len(keys[0]))
	}
	w := b.DType.Size() // bytes per row
	for _, d := range b.Shape[1:] {
		w *= int(d)
	}
	src := make([][]byte, n+1)
	src[0] = b.Data
	for j := 1; j <= n; j++ {
		dn, ok := dts[j-1][name]
		switch {
		case !ok:
			return Tensor{}, fmt.Errorf("%w: %q is in the base but not in delta %d", ErrNoTensor, name, j)
		case dn.DType != b.DType || len(dn.Shape) != len(b.Shape) || !slices.Equal(dn.Shape[1:], b.Shape[1:]) || dn.Shape[0] != int64(len(keys[j])):
			return Tensor{}, fmt.Errorf("%w: %q is %s %v in delta %d (of %d keys), %s %v in the base", ErrMismatch, name, dn.DType, dn.Shape, j, len(keys[j]), b.DType, b.Shape)
		}
		src[j] = dn.Data
	}
	for j, d := range src {
		if len(d) != w*len(keys[j]) {
			return Tensor{}, fmt.Errorf("%w: %q has %d bytes for %d rows of %d", ErrMismatch, name, len(d), len(keys[j]), w)
		}
	}
	data := make([]byte, 0, w*len(rows))
	// Copy runs of consecutive rows of one source at once.
	for r := 0; r < len(rows); {
		e := r + 1
		for e < len(rows) && rows[e].src == rows[r].src && rows[e].i == rows[e-1].i+1 {
			e++
		}
		s := rows[r]
		data = append(data, src[s.src][int(s.i)*w:(int(s.i)+e-r)*w]...)
		r = e
	}
	shape := append([]int64{int64(len(rows))}, b.Shape[1:]...)
	return Tensor{Name: name, DType: b.DType, Shape: shape, Data: data}, nil
}

// DiffTensors returns nil when two shards hold the same tensors, byte for
// byte, whatever their order, and otherwise says which differs first.
func DiffTensors(a, b Shard) error {
	at, bt := a.ByName(), b.ByName()
	names := make([]string, 0, len(at))
	for n := range at {
		names = append(names, n)
	}
	slices.SortFunc(names, cmp.Compare)
	for _, n := range names {
		y, ok := bt[n]
		x := at[n]
		switch {
		case !ok:
			return fmt.Errorf("%q only in the first", n)
		case x.DType != y.DType || !slices.Equal(x.Shape, y.Shape):
			return fmt.Errorf("%q is %s %v and %s %v", n, x.DType, x.Shape, y.DType, y.Shape)
		case !bytes.Equal(x.Data, y.Data):
			return fmt.Errorf("%q differs", n)
		}
	}
	if len(bt) != len(at) {
		return fmt.Errorf("the second has %d tensors, the first %d", len(bt), len(at))
	}
	return nil
}

// InKeyOrder returns s with the rows of each of its sparse tables (those
// of tables it holds) in ascending key order, every per-row tensor of a
// table ("<table>/...") permuted alike, and AnyOrder false: what a shard
// written in key order holds. A shard whose keys ascend already (not
// AnyOrder) is returned as it is. A key that repeats is an error
// (ErrFormat). s is not changed.
func InKeyOrder(s Shard, tables []TableInfo) (Shard, error) {
	if !s.AnyOrder {
		return s, nil
	}
	byName := s.ByName()
	sorted := map[string]Tensor{}
	for _, tb := range tables {
		kt, ok := byName[KeysName(tb.Name)]
		if !ok {
			continue // the table is not on this shard
		}
		keys, err := kt.Uint64s()
		if err != nil {
			return Shard{}, fmt.Errorf("table %q: %w", tb.Name, err)
		}
		order := make([]int32, len(keys))
		for i := range order {
			order[i] = int32(i)
		}
		slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(keys[a], keys[b]) })
		rows := make([]rowSource, len(order))
		for j, i := range order {
			if j > 0 && keys[i] == keys[order[j-1]] {
				return Shard{}, fmt.Errorf("%w: table %q: key %d repeats", ErrFormat, tb.Name, keys[i])
			}
			rows[j] = rowSource{0, i}
		}
		for _, t := range s.Tensors {
			if !strings.HasPrefix(t.Name, tb.Name+"/") || t.Name == DeletedName(tb.Name) || t.Name == IndexName(tb.Name) {
				continue
			}
			st, err := mergeTensor(t.Name, t, nil, [][]uint64{keys}, rows)
			if err != nil {
				return Shard{}, fmt.Errorf("table %q: %w", tb.Name, err)
			}
			sorted[t.Name] = st
		}
	}
	// A table's saved index holds for the rows in the file's order only:
	// the result has none.
	out := s
	out.AnyOrder, out.Indexed = false, false
	out.Tensors = nil
	index := map[string]bool{}
	for _, tb := range tables {
		index[IndexName(tb.Name)] = true
	}
	for _, t := range s.Tensors {
		if index[t.Name] {
			continue
		}
		if st, ok := sorted[t.Name]; ok {
			t = st
		}
		out.Tensors = append(out.Tensors, t)
	}
	if s.Indexed {
		out.Meta = maps.Clone(s.Meta)
		dropIndexMeta(out.Meta, tables)
	}
	return out, nil
}

// dropIndexMeta deletes the saved indexes' metadata (IndexMaskMeta) of
// tables from meta.
func dropIndexMeta(meta map[string]string, tables []TableInfo) {
	for _, tb := range tables {
		delete(meta, ckptformat.IndexMaskMeta(tb.Name))
	}
}
