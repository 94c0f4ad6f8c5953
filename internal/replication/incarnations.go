package replication

import (
	"fmt"
	"hash/fnv"
	"sync"
)

// incarnations gives every copy of shard s the same incarnation ids: a
// hash of the cluster and the shard, then one more per restore (restores
// at start happen on every copy alike), counted afresh in each epoch of
// the membership (a re-formation, where every copy restores the newest
// checkpoint once: newEpoch).
type incarnations struct {
	base uint64
	mu   sync.Mutex // guards e and k
	e, k uint64
}

func newIncarnations(psAddrs []string, s int) *incarnations {
	h := fnv.New64a()
	for _, a := range psAddrs {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	fmt.Fprintf(h, "shard %d", s)
	return &incarnations{base: h.Sum64() | 1}
}

func (in *incarnations) next() uint64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.k++
	return in.base + in.e<<20 + in.k
}

// follow makes id, an incarnation another copy of the shard gave (a copy
// installed at a rejoin carries it), the last one handed out, so that the
// next restore gives this copy the id it gives every other copy. An id of
// another epoch or shard (not of this counter's form) leaves it alone.
func (in *incarnations) follow(id uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if k := id - in.base - in.e<<20; k < 1<<20 {
		in.k = k
	}
}

func (in *incarnations) newEpoch(e uint64) {
	in.mu.Lock()
	in.e, in.k = e, 0
	in.mu.Unlock()
}
