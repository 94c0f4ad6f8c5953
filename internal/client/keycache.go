package client

import (
	"sync"

	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/wire"
)

// keyCache remembers the key sets of recent calls, so that a call with the
// same keys as an earlier one (compared in full) can name the ps's copy of
// them, a cache slot on the connection, instead of sending them again; with
// several ps it also keeps each set's split into the keys of each ps.
//
// Concurrency: mu guards the entries' list, clock and references; an
// entry's keys and split never change while it is referenced.
type keyCache struct {
	mu      sync.Mutex
	entries []*keyEntry
	clock   uint64
	nextUID uint64
}

// keyEntry is one key set: a copy of the keys, and with several ps the
// keys of each ps and their positions in the set.
type keyEntry struct {
	uid   uint64 // 0: not kept (too large), never in a slot
	table string
	keys  []uint64
	perPS [][]uint64
	pos   [][]int32
	refs  int
	used  uint64
}

// maxKeySets is the number of key sets the client remembers.
const maxKeySets = wire.CacheSlots

// keysOf returns the keys of the set that ps i owns.
func (e *keyEntry) keysOf(i int) []uint64 {
	if e.perPS == nil {
		return e.keys
	}
	return e.perPS[i]
}

// get returns the entry of keys of table, referenced until release: a
// remembered one with the same keys, or a new one.
func (kc *keyCache) get(table string, keys []uint64, numPS int) *keyEntry {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	kc.clock++
	for _, e := range kc.entries {
		if e.table == table && len(e.keys) == len(keys) && sameKeys(e.keys, keys) {
			e.refs++
			e.used = kc.clock
			return e
		}
	}
	if len(keys) > wire.MaxCachedKeys {
		// Too many to keep: sent in full every time, split afresh.
		e := &keyEntry{table: table, keys: keys}
		e.split(numPS)
		return e
	}
	// Reuse the memory of the least recently used entry not in use.
	var e *keyEntry
	if len(kc.entries) < maxKeySets {
		e = &keyEntry{}
		kc.entries = append(kc.entries, e)
	} else {
		for _, x := range kc.entries {
			if x.refs == 0 && (e == nil || x.used < e.used) {
				e = x
			}
		}
		if e == nil { // all in use: one more, dropped when released
			e = &keyEntry{}
			kc.entries = append(kc.entries, e)
		}
	}
	kc.nextUID++
	e.uid, e.table, e.refs, e.used = kc.nextUID, table, 1, kc.clock
	e.keys = append(e.keys[:0], keys...)
	e.split(numPS)
	return e
}

// sameKeys compares two key sets of the same length, cheap ends first.
func sameKeys(a, b []uint64) bool {
	if len(a) == 0 {
		return true
	}
	if a[0] != b[0] || a[len(a)-1] != b[len(b)-1] {
		return false
	}
	return string(wire.Uint64Bytes(a)) == string(wire.Uint64Bytes(b))
}

// split fills perPS and pos for numPS > 1, reusing their memory.
func (e *keyEntry) split(numPS int) {
	if numPS == 1 {
		e.perPS, e.pos = nil, nil
		return
	}
	if len(e.perPS) != numPS {
		e.perPS, e.pos = make([][]uint64, numPS), make([][]int32, numPS)
	}
	for i := range numPS {
		e.perPS[i], e.pos[i] = e.perPS[i][:0], e.pos[i][:0]
	}
	for at, k := range e.keys {
		o := placement.KeyShard(k, numPS)
		e.perPS[o] = append(e.perPS[o], k)
		e.pos[o] = append(e.pos[o], int32(at))
	}
}

// release drops the references of a call; entries beyond the cache's size
// go once unused.
func (kc *keyCache) release(es []*keyEntry) {
	if len(es) == 0 {
		return
	}
	kc.mu.Lock()
	defer kc.mu.Unlock()
	for _, e := range es {
		if e.uid != 0 {
			e.refs--
		}
	}
	for len(kc.entries) > maxKeySets {
		i := -1
		for j, x := range kc.entries {
			if x.refs == 0 && (i < 0 || x.used < kc.entries[i].used) {
				i = j
			}
		}
		if i < 0 {
			return
		}
		kc.entries = append(kc.entries[:i], kc.entries[i+1:]...)
	}
}
