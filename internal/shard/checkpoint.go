package shard

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/paramserv/paramserv/internal/ckptformat"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/parallel"
	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// How a shard's state is named in a checkpoint shard file:
//
//	<var>                 F32, the part of the variable this ps holds
//	<var>/<slot>          F32, its optimizer state (SlotNames)
//	<table>/keys          U64 [n], ascending
//	<table>/values        F32 [n, dim]
//	<table>/<slot>        F32 [n, dim]
//	<table>/updates       I64 [n], per-row update counts (Adam)
//	<table>/last_touch    I64 [n], per-row last-touched step (eviction)
//
// and in the shard's metadata "updates/<var>" holds a variable's update count.
// Variables split across ps are stored under their own name on each shard,
// with the rows each holds recorded in the manifest.

// metaRateChanges is the shard Meta key of the chief's rate changes (a JSON
// array of optim.RateChange), absent when there are none: every ps holds
// the same, and a delta's replaces its parent's.
const metaRateChanges = "rate_changes"

// SlotNames names the state slots of a rule, in the order of its state
// vectors, as checkpoints store them.
func SlotNames(rule string, slots int) []string {
	known := map[string][]string{
		"momentum": {"momentum"},
		"adagrad":  {"adagrad_accum"},
		"adam":     {"adam_m", "adam_v"},
		"ftrl":     {"ftrl_n", "ftrl_z"},

		"adagrad_da":       {"adagrad_da_g", "adagrad_da_gg"},
		"adadelta":         {"adadelta_accum", "adadelta_update"},
		"rmsprop":          {"rmsprop_ms", "rmsprop_mom", "rmsprop_mg"}, // mg only when centered
		"proximal_adagrad": {"proximal_adagrad_accum"},
		"adamw":            {"adamw_m", "adamw_v"},
		"lamb":             {"lamb_m", "lamb_v"},
	}
	if names, ok := known[strings.ToLower(rule)]; ok && len(names) == slots {
		return names
	}
	if names, ok := known[strings.ToLower(rule)]; ok && rule == "rmsprop" && slots == 2 {
		return names[:2]
	}
	names := make([]string, slots)
	for i := range names {
		names[i] = fmt.Sprintf("%s_%d", rule, i)
	}
	return names
}

// baseName is the variable a shard-local part name belongs to.
func baseName(part string) string {
	if i := strings.LastIndex(part, "/part_"); i >= 0 {
		if _, err := strconv.Atoi(part[i+len("/part_"):]); err == nil {
			return part[:i]
		}
	}
	return part
}

// Snapshot copies the shard's state into a checkpoint shard, to be written
// to disk after the caller's lock is released. It is Cut().Shard(); a
// server takes the Cut under its lock and builds the Shard after.
func (s *Shard) Snapshot() ckptformat.Shard { return s.Cut().Shard() }

// Cut is a consistent copy of a shard's state, taken under the caller's
// lock. A full cut copies the dense variables and shares the sparse
// tables' pages copy-on-write (sparse.Table.FrozenShared): the lock is held
// for a few words per page, and a push that follows copies the pages it
// writes (a page of up to 8192 rows at a time) until Shard has read them.
// A delta cut copies the changed rows. Its Shard method, run with no lock
// held, builds the checkpoint shard from it.
type Cut struct {
	step   int64
	vars   []cutVar
	tables []frozenTable
	// A delta cut (ckpt_incr.go): vars holds only the variables changed
	// since the parent, tables only their changed rows and deleted keys.
	delta   bool
	parent  int64
	updates map[string]int64   // every variable's update count
	rates   []optim.RateChange // the chief's rate changes (Layout.RateChanges)

	built *ckptformat.Shard // Shard's result

	// StreamShard's tensors read the tiers' rows from cols as the file is
	// written, from the writer's goroutines (atomics: a core holds no
	// locks).
	err  atomic.Pointer[error]         // a tier's rows could not be read
	cols atomic.Pointer[[]TierColumns] // the tiers' rows at the cut (StreamShard), closed by Release
}

// Err reports a table's second tier that could not be read as the cut was
// built (Shard, StreamShard) or, for StreamShard's shard, as it was
// written: the shard lacks its rows and must not be written, or kept.
func (c *Cut) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

// fail records err as the cut's error if it has none.
func (c *Cut) fail(err error) {
	c.err.CompareAndSwap(nil, &err)
}

type cutVar struct {
	name    string
	shape   []int64
	value   []float32
	state   [][]float32
	slots   []string // the names of state's slots (its rule's)
	updates int64
}

type frozenTable struct {
	name    string
	t       *sparse.Table // a Frozen copy
	slots   []string      // its rule's slot names
	deleted []uint64      // delta: keys dropped, unsorted
	cold    TierCut       // the table's second tier at the cut; nil if none
	// coldChanges: a delta cut's view of what changed in the table's
	// second tier; nil if none.
	coldChanges TierChanges
}

// Cut copies the shard's state; see Cut.
func (s *Shard) Cut() *Cut { return s.CutIn(nil) }

// CutSize is the size of the memory a Cut of the shard's tables takes. It
// lets a server allocate that memory, and have the
// kernel map it, with no lock held (see sparse.FrozenMem):
//
//	mu.Lock(); size := sh.CutSize(); mu.Unlock()
//	mem := size.Alloc()
//	mu.Lock(); cut := sh.CutIn(mem); mu.Unlock()
//
// The cut shares the tables' pages copy-on-write; the pushes that follow
// it copy the pages they write into this memory, without page faults.
type CutSize struct {
	tables []sparse.FrozenSize
}

// CutMem is memory for a Cut, from CutSize.Alloc.
type CutMem struct {
	tables []*sparse.FrozenMem
}

// CutSize reports the size of the shard's tables' pages; it costs a few
// words per page. Call it under the caller's lock.
func (s *Shard) CutSize() CutSize {
	var z CutSize
	if s.st == nil {
		return z
	}
	for _, t := range s.st.tableOrd {
		z.tables = append(z.tables, t.t.FrozenSize())
	}
	return z
}

// IndexOnly is z for the tables' index copies alone, not their pages: for
// a cut that no push is expected to follow before it is written (see
// sparse.FrozenSize.IndexOnly).
func (z CutSize) IndexOnly() CutSize {
	out := CutSize{tables: make([]sparse.FrozenSize, len(z.tables))}
	for i, t := range z.tables {
		out.tables[i] = t.IndexOnly()
	}
	return out
}

// Alloc allocates z's memory and writes to each of its pages; it reads no
// shard, and is meant to run with no lock held.
func (z CutSize) Alloc() *CutMem {
	m := &CutMem{}
	for _, t := range z.tables {
		m.tables = append(m.tables, t.Alloc())
	}
	return m
}

// CutIn is Cut, the tables' pages copied on write into m's memory where it
// has the room (the tables may have grown, or been replaced, since
// CutSize); m may be nil, and must not be used again.
func (s *Shard) CutIn(m *CutMem) *Cut {
	st := s.st
	c := &Cut{step: st.tracker.Step(), rates: slices.Clone(st.layout.RateChanges)}
	for _, v := range st.order {
		cv := cutVar{name: baseName(v.name), shape: v.shape, value: slices.Clone(v.value), updates: v.updates,
			slots: SlotNames(v.rule.Name(), v.rule.StateSlots())}
		for _, state := range v.state {
			cv.state = append(cv.state, slices.Clone(state))
		}
		c.vars = append(c.vars, cv)
	}
	for i, t := range st.tableOrd {
		var mem *sparse.FrozenMem
		if m != nil && i < len(m.tables) {
			mem = m.tables[i]
		}
		ft := frozenTable{name: t.name, t: t.t.FrozenShared(mem), slots: SlotNames(t.rule.Name(), t.rule.StateSlots())}
		if t.tier != nil {
			ft.cold = t.tier.Cut()
		}
		c.tables = append(c.tables, ft)
	}
	return c
}

// Step is the step the cut reflects.
func (c *Cut) Step() int64 { return c.step }

// Shard builds the checkpoint shard of the cut: tables sorted by key and
// every tensor encoded (StreamShard writes them unsorted). It may run concurrently with the shard's training.
// The tensors share the cut's memory, which nothing changes. It releases
// the tables' pages (see Release); a second call returns the same shard.
func (c *Cut) Shard() ckptformat.Shard {
	if c.built == nil {
		sh := c.shard()
		c.built = &sh
		c.Release()
	}
	return *c.built
}

// keepColumns adds a tier's column files to those Release closes. Only
// build calls it, from one goroutine; Release may run beside it.
func (c *Cut) keepColumns(tc TierColumns) {
	for {
		old := c.cols.Load()
		var next []TierColumns
		if old != nil {
			next = append(slices.Clone(*old), tc)
		} else {
			next = []TierColumns{tc}
		}
		if c.cols.CompareAndSwap(old, &next) {
			return
		}
	}
}

// Release tells the shard's tables that the cut no longer reads their
// pages, so they stop copying a page before changing it (see
// sparse.Table.FrozenShared). Shard calls it; a caller that drops a cut
// without calling Shard should. It may be called from any goroutine, more
// than once; Shard must not be called after it unless it was before.
func (c *Cut) Release() {
	var cols []TierColumns
	if p := c.cols.Swap(nil); p != nil {
		cols = *p
	}
	for _, tc := range cols {
		_ = tc.Close() // files of the tier's own, deleted: nothing lost if one stays
	}
	for i := range c.tables {
		t := &c.tables[i]
		t.t.Release()
		if t.cold != nil {
			t.cold.Release()
		}
		if t.coldChanges != nil {
			t.coldChanges.Release()
		}
	}
}

// StreamShard is Shard for checkpoint.WriteShard alone, which writes the
// file as it reads the tables instead of after: each table is not copied
// into memory nor sorted, its tensors are filled from the cut's pages in
// the order they hold the rows (sparse.Table.InTableOrder) as the file is
// written (ckptformat.Tensor.Fill), and the shard is marked AnyOrder. A
// table with a disk tier has its rows in memory so, then its tier's, which
// the tier first writes to files of its own a column each
// (TierCut.Columns): its rows on disk are never gathered in memory. The
// tensors read the cut's pages and those files until WriteShard returns:
// check Err (a file that could not be read leaves the shard's bytes
// wrong), then call Release. A delta cut's shard is Shard's.
func (c *Cut) StreamShard() ckptformat.Shard {
	if c.delta || c.built != nil {
		return c.Shard()
	}
	return c.build(true)
}

func (c *Cut) shard() ckptformat.Shard { return c.build(false) }

// build builds the cut's shard, with the in-order tables' tensors filled
// as they are written where stream is set.
func (c *Cut) build(stream bool) ckptformat.Shard {
	sh := ckptformat.Shard{Step: c.step, Meta: map[string]string{}, Delta: c.delta, Parent: c.parent}
	if len(c.rates) > 0 {
		b, err := json.Marshal(c.rates)
		if err != nil {
			panic(fmt.Sprintf("shard: rate changes %+v: %v", c.rates, err)) // plain numbers and strings
		}
		sh.Meta[metaRateChanges] = string(b)
	}
	for name, n := range c.updates {
		sh.Meta["updates/"+name] = strconv.FormatInt(n, 10)
	}
	for _, v := range c.vars {
		sh.Tensors = append(sh.Tensors, ckptformat.Float32TensorOf(v.name, v.shape, v.value))
		for i, state := range v.state {
			sh.Tensors = append(sh.Tensors, ckptformat.Float32TensorOf(ckptformat.SlotName(v.name, v.slots[i]), v.shape, state))
		}
		sh.Meta["updates/"+v.name] = strconv.FormatInt(v.updates, 10)
	}
	for _, t := range c.tables {
		if stream && t.cold != nil {
			// The rows in memory as the table holds them, then the
			// tier's as it holds them, streamed to the file.
			cols, err := t.cold.Columns()
			// The tier's view is read: let it go now, so that the
			// tier's writes stop keeping its pages for it.
			t.cold.Release()
			if err != nil {
				c.fail(fmt.Errorf("table %q: %w", t.name, err))
				continue
			}
			c.keepColumns(cols)
			name := t.name
			sh.Tensors = append(sh.Tensors, tieredTable(t, t.t.InTableOrder(), cols, func(err error) {
				c.fail(fmt.Errorf("table %q: %w", name, err))
			})...)
			sh.AnyOrder = true
			continue
		}
		if stream {
			// The rows as the table holds them, streamed to the file
			// with no sort: the shard's keys are then in any order.
			v := t.t.InTableOrder()
			sh.Tensors = append(sh.Tensors, streamTable(t, v)...)
			sh.AnyOrder = true
			// And the table's index, where the cut took it: a restore
			// onto as many ps takes it instead of building it.
			if ix, ok := v.Index(); ok && littleEndian {
				sh.Tensors = append(sh.Tensors, ckptformat.Tensor{Name: ckptformat.IndexName(t.name), DType: ckptformat.U64,
					Shape: []int64{int64(len(ix.Slots) / 2)}, Data: unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(ix.Slots))), 4*len(ix.Slots))})
				sh.Meta[ckptformat.IndexMaskMeta(t.name)] = strconv.FormatUint(uint64(ix.RowMask), 10)
				sh.Indexed = true
			}
			continue
		}
		snap := t.t.Export()
		if t.cold != nil {
			all, err := t.cold.Merge(snap)
			if err != nil {
				c.fail(fmt.Errorf("table %q: %w", t.name, err))
			}
			snap = all
		}
		deleted := t.deleted
		if t.coldChanges != nil {
			all, del, err := t.coldChanges.Merge(snap, deleted)
			if err != nil {
				c.fail(fmt.Errorf("table %q: %w", t.name, err))
			}
			snap, deleted = all, del
		}
		n, d := int64(len(snap.Keys)), int64(snap.Dim)
		sh.Tensors = append(sh.Tensors,
			ckptformat.Uint64TensorOf(ckptformat.KeysName(t.name), []int64{n}, snap.Keys),
			ckptformat.Float32TensorOf(ckptformat.ValuesName(t.name), []int64{n, d}, snap.Values))
		for i, state := range snap.State {
			sh.Tensors = append(sh.Tensors, ckptformat.Float32TensorOf(ckptformat.SlotName(t.name, t.slots[i]), []int64{n, d}, state))
		}
		if snap.Updates != nil {
			u := make([]int64, len(snap.Updates))
			for i, x := range snap.Updates {
				u[i] = int64(x)
			}
			sh.Tensors = append(sh.Tensors, ckptformat.Int64TensorOf(ckptformat.SlotName(t.name, "updates"), []int64{n}, u))
		}
		if snap.LastTouch != nil {
			sh.Tensors = append(sh.Tensors, ckptformat.Int64TensorOf(ckptformat.SlotName(t.name, "last_touch"), []int64{n}, snap.LastTouch))
		}
		if c.delta {
			del := slices.Compact(slices.Sorted(slices.Values(deleted)))
			sh.Tensors = append(sh.Tensors, ckptformat.Uint64TensorOf(ckptformat.DeletedName(t.name), []int64{int64(len(del))}, del))
		}
	}
	return sh
}

// streamTable is the tensors of table t, in the order of v, that fill
// themselves from the table's pages (see StreamShard): the same tensors,
// byte for byte, as Shard's.
func streamTable(t frozenTable, v *sparse.Sorted) []ckptformat.Tensor {
	n, d := int64(v.Len()), int64(t.t.Dim())
	ts := []ckptformat.Tensor{
		ckptformat.Uint64TensorFill(ckptformat.KeysName(t.name), []int64{n}, v.Keys),
		ckptformat.Float32TensorFill(ckptformat.ValuesName(t.name), []int64{n, d}, func(dst []float32, i int) { v.Floats(0, dst, i) }),
	}
	for i, slot := range t.slots {
		ts = append(ts, ckptformat.Float32TensorFill(ckptformat.SlotName(t.name, slot), []int64{n, d}, func(dst []float32, e int) { v.Floats(1+i, dst, e) }))
	}
	if v.HasUpdates() {
		ts = append(ts, ckptformat.Int64TensorFill(ckptformat.SlotName(t.name, "updates"), []int64{n}, v.Updates))
	}
	if v.HasLastTouch() {
		ts = append(ts, ckptformat.Int64TensorFill(ckptformat.SlotName(t.name, "last_touch"), []int64{n}, v.LastTouch))
	}
	return ts
}

// tieredTable is the tensors of table t with a disk tier: its rows in
// memory in the order of v, then its tier's rows, read from cols as the
// file is written. A column that cannot be read is fail's (its bytes are
// left as they are).
func tieredTable(t frozenTable, v *sparse.Sorted, cols TierColumns, fail func(error)) []ckptformat.Tensor {
	hot := streamTable(t, v)
	nh, d := int64(v.Len()), int64(t.t.Dim())
	n := nh + int64(cols.Len())
	col := map[string]int{
		ckptformat.KeysName(t.name):               ColKeys,
		ckptformat.ValuesName(t.name):             ColValues,
		ckptformat.SlotName(t.name, "updates"):    ColUpdates,
		ckptformat.SlotName(t.name, "last_touch"): ColTouch,
	}
	for i, slot := range t.slots {
		col[ckptformat.SlotName(t.name, slot)] = ColValues + 1 + i
	}
	for i := range hot {
		ht := &hot[i]
		c := col[ht.Name]
		// A row's bytes in the tensor, and the hot rows' bytes.
		rowBytes := int64(ht.DType.Size())
		if len(ht.Shape) == 2 {
			ht.Shape = []int64{n, d}
			rowBytes *= d
		} else {
			ht.Shape = []int64{n}
		}
		split, fill := nh*rowBytes, ht.Fill
		ht.Fill = func(dst []byte, off int64) {
			if off < split {
				k := min(int64(len(dst)), split-off)
				fill(dst[:k], off)
				dst, off = dst[k:], off+k
			}
			if len(dst) > 0 {
				if err := cols.ReadAt(c, dst, off-split); err != nil {
					fail(err)
				}
			}
		}
	}
	return hot
}

// LayoutOf is the mode, optimizer and tables a checkpoint records, for a
// shard of a cluster of numWorkers workers (the variables come from the
// placement, see Restore).
func LayoutOf(m ckptformat.Contents, numWorkers int) Layout {
	t := m.Training
	return Layout{
		Optimizer:           t.Optimizer,
		Sync:                t.Mode == "sync",
		ReplicasToAggregate: min(t.ReplicasToAggregate, numWorkers),
		NumWorkers:          numWorkers,
		GlobalStep:          m.Step,
		MaxStaleness:        t.MaxStaleness,
		SyncTimeout:         t.SyncTimeout,
		SyncProceed:         t.SyncProceed,
		SplitBytes:          t.SplitBytes,
		Tables:              t.Tables,
		GoalStep:            t.GoalStep,
	}
}

// Restore builds, as a pure function of the checkpoint m and its shard
// files (read(k) returns shard k), the state of ps task of numPS in a
// cluster of numWorkers workers. With the number of ps m was written with,
// the ps reads only its own shard; otherwise it reads them all and takes
// its share under the current placement (re-sharding). It takes no lock
// and touches no shard: Install the result. run spreads the import of
// large tables over the cores (nil: parallel.Serial); the state's tables
// keep it until Install gives them the shard's.
//
// read may return shards whose files are still being checked
// (checkpoint.ReadShardOverlapped): Restore builds the state while they
// are, then waits for every shard it read to be verified and returns the
// first shard's error, and no state, if one was damaged. A fault reading a
// mapped file (it shrank, or the disk failed) is an error too.
func Restore(m ckptformat.Contents, read func(k int) (*ckptformat.Shard, error), task, numPS, numWorkers int, run parallel.Runner) (st *State, err error) {
	return RestoreInto(nil, m, read, task, numPS, numWorkers, run)
}

// RestoreInto is Restore for a shard whose tables get a second tier
// (Config.Tiers): where tiers is a TierLoader, each table's rows past its
// share of memory go straight to the tier as the state is built, not
// into the table first (TierLoader). Install the state in that shard.
func RestoreInto(tiers Tiers, m ckptformat.Contents, read func(k int) (*ckptformat.Shard, error), task, numPS, numWorkers int, run parallel.Runner) (st *State, err error) {
	return RestoreChainsInto(tiers, m, read, nil, task, numPS, numWorkers, run)
}

// Chain is the files of one shard of a delta checkpoint, unapplied
// (checkpoint.ReadChain): its full base, then its deltas, oldest first.
// Rows says what applying them keeps of a table (checkpoint.ChainRows):
// the base's rows whose keys changed does not report, then rows.
type Chain struct {
	Links []*ckptformat.Shard
	Rows  func(table string) (changed func(key uint64) bool, rows []ckptformat.RowRef, err error)
}

// RestoreChainsInto is RestoreInto that, for a shard whose tiers take rows
// as a stream (TierStreamLoader), reads each shard of a delta checkpoint as
// its chain (chain(k); nil for a full shard, which read reads) instead of
// read's applied shard: the rows go to the tier a run at a time, from
// the files as they lie, as do the rows of a re-sharding restore. With a
// nil chain, or tiers that take no stream, it is RestoreInto.
func RestoreChainsInto(tiers Tiers, m ckptformat.Contents, read func(k int) (*ckptformat.Shard, error), chain func(k int) (*Chain, error), task, numPS, numWorkers int, run parallel.Runner) (st *State, err error) {
	loader, _ := tiers.(TierLoader)
	var loaded []*sparse.Table
	if loader != nil {
		defer func() {
			if err != nil {
				for _, t := range loaded {
					loader.Unload(t)
				}
			}
		}()
	}
	var got []*ckptformat.Shard
	defer func() {
		// A damaged file's error comes before whatever building the
		// state from it ran into.
		for _, sh := range got {
			if verr := sh.Verified(); verr != nil {
				st, err = nil, fmt.Errorf("checkpoint of step %d: %w", m.Step, verr)
				return
			}
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(interface{ Addr() uintptr })
			if !ok || !inShards(got, f.Addr()) {
				// Bytes not yet checked may be any bytes: a panic
				// on a file that turns out damaged is its checksum
				// error (the deferred check above); on a sound one
				// it is a bug.
				for _, sh := range got {
					if sh.Verified() != nil {
						return
					}
				}
				panic(r)
			}
			st, err = nil, fmt.Errorf("checkpoint of step %d: reading a shard file failed (it shrank while read, or the disk failed): %v", m.Step, r)
		}
	}()
	var load func(t *sparse.Table, rows sparse.Snapshot) error
	var stream func(t *sparse.Table, rows RowStream) error
	if loader != nil {
		load = func(t *sparse.Table, rows sparse.Snapshot) error {
			loaded = append(loaded, t)
			return loader.Load(t, rows, len(m.Tables))
		}
		if sl, ok := loader.(TierStreamLoader); ok {
			stream = func(t *sparse.Table, rows RowStream) error {
				loaded = append(loaded, t)
				return sl.LoadStream(t, rows, len(m.Tables))
			}
		}
	}
	if stream == nil {
		chain = nil
	}
	files := &shardFiles{m: m, read: func(k int) (*ckptformat.Shard, error) {
		sh, err := read(k)
		if sh != nil {
			got = append(got, sh)
		}
		return sh, err
	}}
	if chain != nil {
		files.chain = func(k int) (*Chain, error) {
			ch, err := chain(k)
			if ch != nil {
				got = append(got, ch.Links...)
			}
			return ch, err
		}
	}
	return restore(m, files, task, numPS, numWorkers, run, load, stream)
}

// inShards reports whether addr is in the data of one of the shards' tensors.
func inShards(shards []*ckptformat.Shard, addr uintptr) bool {
	for _, sh := range shards {
		for _, t := range sh.Tensors {
			if len(t.Data) > 0 {
				lo := uintptr(unsafe.Pointer(unsafe.SliceData(t.Data)))
				if addr >= lo && addr-lo < uintptr(len(t.Data)) {
					return true
				}
			}
		}
	}
	return false
}

// restore builds the state from files (of m); load, if not nil, takes
// each table's rows instead of its Import, and stream, if not nil, takes
// them as a stream instead of load.
func restore(m ckptformat.Contents, files *shardFiles, task, numPS, numWorkers int, run parallel.Runner, load func(*sparse.Table, sparse.Snapshot) error, stream func(*sparse.Table, RowStream) error) (*State, error) {
	l, t := LayoutOf(m, numWorkers), m.Training
	rule, err := optim.New(l.Optimizer)
	if err != nil {
		return nil, fmt.Errorf("checkpoint of step %d: %w", m.Step, err)
	}
	// This ps's parts under the current placement.
	vars := make([]model.Variable, len(m.Variables))
	for i, v := range m.Variables {
		shape := make([]int, len(v.Shape))
		for j, d := range v.Shape {
			shape[j] = int(d)
		}
		vars[i] = model.Variable{Name: v.Name, Shape: shape}
	}
	plan, err := placement.Place(numPS, vars, int(l.SplitBytes))
	if err != nil {
		return nil, fmt.Errorf("checkpoint of step %d: %w", m.Step, err)
	}
	reshard := m.NumPS != numPS
	files.m, files.shards = m, make([]*ckptformat.Shard, m.NumShards)
	// The chief's rate changes, the same in every shard: this ps's own
	// (read below in any case), or the first when re-sharding.
	if sh, err := files.shard(min(task, m.NumShards-1)); err == nil && sh.Meta[metaRateChanges] != "" {
		if err := json.Unmarshal([]byte(sh.Meta[metaRateChanges]), &l.RateChanges); err != nil {
			return nil, fmt.Errorf("checkpoint of step %d: meta %s: %w", m.Step, metaRateChanges, err)
		}
	}
	var parts []restoredPart
	moved := reshard // a variable is not where the checkpoint put it
	for i, pv := range plan.Vars {
		v := m.Variables[i]
		// A ps reads its own shard file when the checkpoint placed the
		// variable as today's placement does; otherwise (another number of
		// ps, or a placement that changed since) it assembles the variable
		// from the parts the manifest lists and takes its share.
		direct := !reshard && samePlacement(v, pv)
		moved = moved || !direct
		for _, part := range pv.Parts {
			if part.PS != task {
				continue
			}
			r, err := files.varPart(v, part, direct, task, rule, t.VarOptimizers[v.Name])
			if err != nil {
				return nil, err
			}
			shape := make([]int64, len(part.Shape))
			for j, d := range part.Shape {
				shape[j] = int64(d)
			}
			l.Vars = append(l.Vars, VarSpec{Name: part.Name, Shape: shape, Optimizer: t.VarOptimizers[v.Name]})
			parts = append(parts, r)
		}
	}
	st, err := Build(l, func(i int, dst []float32) error {
		if len(parts[i].value) != len(dst) {
			return fmt.Errorf("%d values for a shape of %d", len(parts[i].value), len(dst))
		}
		copy(dst, parts[i].value)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint of step %d: %w", m.Step, err)
	}
	st.setParallel(run)
	for i, v := range st.order {
		for j := range v.state {
			copy(v.state[j], parts[i].state[j])
		}
		v.updates = parts[i].updates
	}
	if err := files.tables(st, task, numPS, reshard, run, load, stream); err != nil {
		return nil, err
	}
	st.restored = m.Step
	st.resetChanges(m.Step)
	if moved {
		// A delta is taken against a checkpoint whose files hold what
		// this ps holds: not one re-sharded or re-placed.
		st.lastCut = -1
	}
	return st, nil
}

// shardFiles reads a checkpoint's shard files for restore, each once.
type shardFiles struct {
	m      ckptformat.Contents
	read   func(k int) (*ckptformat.Shard, error)
	chain  func(k int) (*Chain, error) // nil: read reads every shard
	shards []*ckptformat.Shard         // those read so far, by index
	chains map[int]*Chain              // the chains read so far, by index
}

// shard returns shard file k, reading it the first time. Where k is read
// as a chain, it is the chain's shard but for its tables (chainShard).
func (c *shardFiles) shard(k int) (*ckptformat.Shard, error) {
	if k < 0 || k >= len(c.shards) {
		return nil, fmt.Errorf("shard %d of a checkpoint of %d shards", k, len(c.shards))
	}
	if c.shards[k] == nil {
		if c.chain != nil {
			ch, err := c.chain(k)
			if err != nil {
				return nil, err
			}
			if ch != nil {
				if len(ch.Links) == 0 {
					return nil, fmt.Errorf("shard %d: a chain of no files", k)
				}
				if c.chains == nil {
					c.chains = map[int]*Chain{}
				}
				c.chains[k] = ch
				c.shards[k] = chainShard(ch)
				return c.shards[k], nil
			}
		}
		sh, err := c.read(k)
		if err != nil {
			return nil, err
		}
		c.shards[k] = sh
	}
	return c.shards[k], nil
}

// chainShard is what applying ch's deltas gives but for the tables' rows,
// which the caller reads from the chain as a stream: each tensor the
// newest file's that has it, the metadata the base's overlaid with each
// delta's, the step the newest's. Nothing is copied.
func chainShard(ch *Chain) *ckptformat.Shard {
	base, last := ch.Links[0], ch.Links[len(ch.Links)-1]
	out := &ckptformat.Shard{Step: last.Step, Meta: map[string]string{}, AnyOrder: base.AnyOrder}
	at := map[string]int{}
	for _, l := range ch.Links {
		for k, v := range l.Meta {
			out.Meta[k] = v
		}
		for _, t := range l.Tensors {
			if i, ok := at[t.Name]; ok {
				out.Tensors[i] = t
				continue
			}
			at[t.Name] = len(out.Tensors)
			out.Tensors = append(out.Tensors, t)
		}
	}
	return out
}

// full assembles a tensor of variable v (its value or a slot) from the
// parts of every shard holding it, in row order.
func (c *shardFiles) full(v ckptformat.VariableInfo, name string) ([]float32, error) {
	var out []float32
	for _, p := range v.Parts {
		sh, err := c.shard(p.Shard)
		if err != nil {
			return nil, err
		}
		f, err := sh.Float32s(name)
		if err != nil {
			return nil, err
		}
		out = append(out, f...)
	}
	return out, nil
}

// restoredPart is the part of a dense variable a ps restores.
type restoredPart struct {
	value   []float32
	state   [][]float32
	updates int64
}

// varPart reads the part of variable v that ps task holds under the
// current placement, with the state slots of its rule (rule, or its own):
// from its own file when direct, else cut from the whole variable.
func (c *shardFiles) varPart(v ckptformat.VariableInfo, part placement.Part, direct bool, task int, rule optim.Rule, own *optim.Config) (restoredPart, error) {
	step := c.m.Step
	get := func(name string) ([]float32, error) {
		if direct {
			sh, err := c.shard(task)
			if err != nil {
				return nil, err
			}
			return sh.Float32s(name)
		}
		f, err := c.full(v, name)
		if err != nil {
			return nil, err
		}
		if part.Offset+part.Len > len(f) {
			return nil, fmt.Errorf("%q has %d values, the placement needs %d", name, len(f), part.Offset+part.Len)
		}
		return f[part.Offset : part.Offset+part.Len], nil
	}
	value, err := get(v.Name)
	if err != nil {
		return restoredPart{}, fmt.Errorf("checkpoint of step %d: variable %q: %w", step, v.Name, err)
	}
	if len(value) != part.Len {
		return restoredPart{}, fmt.Errorf("checkpoint of step %d: variable %q has %d values for this ps, want %d", step, v.Name, len(value), part.Len)
	}
	r := restoredPart{value: value}
	vrule, err := ruleOf(rule, own)
	if err != nil {
		return restoredPart{}, fmt.Errorf("checkpoint of step %d: variable %q: %w", step, v.Name, err)
	}
	for _, slot := range SlotNames(vrule.Name(), vrule.StateSlots()) {
		st, err := get(ckptformat.SlotName(v.Name, slot))
		if err != nil {
			return restoredPart{}, fmt.Errorf("checkpoint of step %d: variable %q: %w", step, v.Name, err)
		}
		if len(st) != part.Len {
			return restoredPart{}, fmt.Errorf("checkpoint of step %d: variable %q: slot %s has %d values, want %d", step, v.Name, slot, len(st), part.Len)
		}
		r.state = append(r.state, st)
	}
	// The update count (Adam's bias correction): the most any part
	// recorded, which is every part's in a synchronous job.
	for _, p := range v.Parts {
		if sh, err := c.shard(p.Shard); err == nil {
			n, _ := strconv.ParseInt(sh.Meta["updates/"+v.Name], 10, 64)
			r.updates = max(r.updates, n)
		}
	}
	return r, nil
}

// tables imports the rows of every sparse table of the checkpoint that
// ps task of numPS holds into st's tables, or hands them to load.
func (c *shardFiles) tables(st *State, task, numPS int, reshard bool, run parallel.Runner, load func(*sparse.Table, sparse.Snapshot) error, stream func(*sparse.Table, RowStream) error) error {
	m := c.m
	for _, tb := range m.Tables {
		t, ok := st.tables[tb.Name]
		if !ok {
			return fmt.Errorf("checkpoint of step %d: table %q has no spec in the manifest", m.Step, tb.Name)
		}
		from := []int{task}
		if reshard {
			from = tb.Shards
		}
		if stream != nil { // a disk tier: the rows go to it a run at a time
			rows, err := c.tableStream(from, tb, SlotNames(t.rule.Name(), t.rule.StateSlots()), t.t.Dim(), reshard, task, numPS)
			if err == nil {
				err = stream(t.t, rows)
			}
			if err != nil {
				return fmt.Errorf("checkpoint of step %d: table %q: %w", m.Step, tb.Name, err)
			}
			continue
		}
		// A ps's own file written in table order (AnyOrder) is imported
		// as it lies, the index built as the rows are copied.
		anyOrder := false
		if !reshard {
			sh, err := c.shard(task)
			if err != nil {
				return fmt.Errorf("checkpoint of step %d: table %q: %w", m.Step, tb.Name, err)
			}
			anyOrder = sh.AnyOrder
		}
		t.loseBound()
		rows := func(inOrder bool) error {
			snap, err := tableRows(c.shard, from, tb, SlotNames(t.rule.Name(), t.rule.StateSlots()), t.t.Dim(), reshard, task, numPS, m.Step, inOrder, run)
			if err != nil {
				return err
			}
			if load != nil { // a disk tier: rows past the budget go to its store
				return load(t.t, snap)
			}
			if anyOrder {
				if ix, ok := savedIndex(c.shards[task], tb.Name); ok {
					var err error
					if keep, mapped := c.shards[task].Keep(); mapped {
						// The keys and index stay in the file's
						// pages, which the table writes copy-on-write.
						err = t.t.ImportIndexedInPlace(snap, ix, func() func() {
							return keep(bytesOf(snap.Keys), bytesOf(ix.Slots))
						})
					} else {
						err = t.t.ImportIndexed(snap, ix)
					}
					if !errors.Is(err, sparse.ErrIndex) {
						return err
					}
					// An index this program would not have built
					// (another version's hash or bucket layout; the
					// file's checksum rules out damage): the rows
					// are good, the index is built again.
				}
				return t.t.ImportAnyOrder(snap)
			}
			return t.t.Import(snap)
		}
		// A ps's own file in key order, as the writer of old left
		// them: Import checks that as it copies them. Keys out of order
		// are sorted.
		err := rows(true)
		if errors.Is(err, sparse.ErrUnordered) {
			err = rows(false)
		}
		if err != nil {
			return fmt.Errorf("checkpoint of step %d: table %q: %w", m.Step, tb.Name, err)
		}
	}
	return nil
}

// samePlacement reports whether the checkpoint placed v's parts on the
// shards (and rows) where today's placement pv puts them.
func samePlacement(v ckptformat.VariableInfo, pv placement.Var) bool {
	if len(v.Parts) != len(pv.Parts) {
		return false
	}
	for j, p := range v.Parts {
		q := pv.Parts[j]
		if p.Shard != q.PS {
			return false
		}
		if len(pv.Parts) > 1 {
			if len(p.Rows) != 2 || len(q.Shape) == 0 || p.Rows[1]-p.Rows[0] != int64(q.Shape[0]) {
				return false
			}
		}
	}
	return true
}

// tableRows gathers a table's rows from the given shards, keeping (when
// re-sharding) those ps task owns among numPS, sorted by key.
//
// A row's last-touched step is a global step, so it is kept within 0 and
// the checkpoint's step: a value outside (a damaged or hand-made file) would
// otherwise stretch the table's window of representable steps and lose
// every row's.
func tableRows(read func(int) (*ckptformat.Shard, error), from []int, tb ckptformat.TableInfo, slots []string, dim int, reshard bool, task, numPS int, step int64, inOrder bool, par parallel.Runner) (sparse.Snapshot, error) {
	type row struct {
		key      uint64
		shard, i int
	}
	var rows []row
	type cols struct {
		values  []float32
		state   [][]float32
		updates []int64
		touch   []int64
	}
	data := map[int]*cols{}
	keysOf := map[int][]uint64{}
	hasUpdates, hasTouch := false, false
	for _, k := range from {
		sh, err := read(k)
		if err != nil {
			return sparse.Snapshot{}, err
		}
		// Keys, values and state are read in place (Import copies them);
		// last_touch is copied, as it is changed below.
		keys, err := uint64sView(sh, ckptformat.KeysName(tb.Name))
		if err != nil {
			return sparse.Snapshot{}, err
		}
		c := &cols{}
		if c.values, err = float32sView(sh, ckptformat.ValuesName(tb.Name)); err != nil {
			return sparse.Snapshot{}, err
		}
		if len(c.values) != len(keys)*dim {
			return sparse.Snapshot{}, fmt.Errorf("shard %d: %d keys of dim %d need %d values, got %d", k, len(keys), dim, len(keys)*dim, len(c.values))
		}
		for _, slot := range slots {
			st, err := float32sView(sh, ckptformat.SlotName(tb.Name, slot))
			if err != nil {
				return sparse.Snapshot{}, err
			}
			if len(st) != len(c.values) {
				return sparse.Snapshot{}, fmt.Errorf("shard %d: slot %s has %d values, want %d", k, slot, len(st), len(c.values))
			}
			c.state = append(c.state, st)
		}
		if u, err := sh.Int64s(ckptformat.SlotName(tb.Name, "updates")); err == nil && len(u) == len(keys) {
			c.updates, hasUpdates = u, true
		}
		if lt, err := sh.Int64s(ckptformat.SlotName(tb.Name, "last_touch")); err == nil && len(lt) == len(keys) {
			c.touch, hasTouch = lt, true
		}
		data[k] = c
		keysOf[k] = keys
	}
	// A ps restoring its own shard takes the file's columns as they are
	// when the keys are in order, as the writer leaves them (inOrder: the
	// caller's Import checks).
	if len(from) == 1 && !reshard && (inOrder || sparse.Unordered(keysOf[from[0]], par) < 0) {
		c := data[from[0]]
		snap := sparse.Snapshot{Dim: dim, Keys: keysOf[from[0]], Values: c.values, State: c.state}
		if snap.State == nil {
			snap.State = make([][]float32, len(slots))
		}
		if hasUpdates {
			snap.Updates = make([]uint32, len(c.updates))
			for i, u := range c.updates {
				snap.Updates[i] = uint32(u)
			}
		}
		if hasTouch {
			snap.LastTouch = c.touch
			for i, t := range snap.LastTouch {
				snap.LastTouch[i] = min(max(t, 0), step)
			}
		}
		return snap, nil
	}
	for _, k := range from {
		for i, key := range keysOf[k] {
			if reshard && placement.KeyShard(key, numPS) != task {
				continue
			}
			rows = append(rows, row{key: key, shard: k, i: i})
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
	snap := sparse.Snapshot{Dim: dim, Keys: make([]uint64, len(rows)), Values: make([]float32, 0, len(rows)*dim)}
	snap.State = make([][]float32, len(slots))
	if hasUpdates {
		snap.Updates = make([]uint32, len(rows))
	}
	if hasTouch {
		snap.LastTouch = make([]int64, len(rows))
	}
	for j, r := range rows {
		c := data[r.shard]
		snap.Keys[j] = r.key
		snap.Values = append(snap.Values, c.values[r.i*dim:(r.i+1)*dim]...)
		for si := range slots {
			snap.State[si] = append(snap.State[si], c.state[si][r.i*dim:(r.i+1)*dim]...)
		}
		if hasUpdates && c.updates != nil {
			snap.Updates[j] = uint32(c.updates[r.i])
		}
		if hasTouch && c.touch != nil {
			snap.LastTouch[j] = min(max(c.touch[r.i], 0), step)
		}
	}
	return snap, nil
}

// float32sView is the F32 tensor called name, read in place where it can
// be (see ckptformat.Tensor.Float32sView): not to be changed.
func float32sView(sh *ckptformat.Shard, name string) ([]float32, error) {
	t, err := sh.Lookup(name)
	if err != nil {
		return nil, err
	}
	return t.Float32sView()
}

// uint64sView is float32sView for U64.
// savedIndex is the index of table a shard holds beside its rows
// (ckptformat.Shard.Indexed), read in place; ok is false when it has none
// (or this host is not little-endian, as the file is).
func savedIndex(sh *ckptformat.Shard, table string) (ix sparse.SavedIndex, ok bool) {
	if sh == nil || !sh.Indexed || !littleEndian {
		return sparse.SavedIndex{}, false
	}
	mask, err := strconv.ParseUint(sh.Meta[ckptformat.IndexMaskMeta(table)], 10, 32)
	if err != nil {
		return sparse.SavedIndex{}, false
	}
	v, err := uint64sView(sh, ckptformat.IndexName(table))
	if err != nil || len(v) == 0 {
		return sparse.SavedIndex{}, false
	}
	return sparse.SavedIndex{Slots: unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(v))), 2*len(v)), RowMask: uint32(mask)}, true
}

// bytesOf is the memory of s.
func bytesOf[T uint32 | uint64](s []T) []byte {
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

// littleEndian: the host stores numbers as the checkpoint files do.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

func uint64sView(sh *ckptformat.Shard, name string) ([]uint64, error) {
	t, err := sh.Lookup(name)
	if err != nil {
		return nil, err
	}
	return t.Uint64sView()
}
