package shard

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/paramserv/paramserv/internal/consistency"
)

// copyHeader is the part of a shard's copy that is not tensors.
type copyHeader struct {
	Layout      Layout           `json:"layout"`
	Updates     []int64          `json:"updates"`
	Tracker     consistency.Copy `json:"tracker"`
	Done        []int            `json:"done,omitempty"`
	Incarnation uint64           `json:"incarnation"`
	Pending     bool             `json:"pending,omitempty"` // sync: the current step has gradients
}

// EncodeCopy is the shard's whole state as bytes, for a replica that
// rejoins (docs/REPLICATION.md): the layout, the tracker, the workers done
// and the incarnation, then each variable's values, optimizer slots and
// (sync) accumulated gradients, little-endian. DecodeCopy of it gives a
// shard that behaves bit for bit as this one. Dense variables only.
func (s *Shard) EncodeCopy() ([]byte, error) {
	if s.st == nil {
		h, _ := json.Marshal(copyHeader{Incarnation: s.incarnation, Done: s.DoneWorkers()})
		return binary.LittleEndian.AppendUint32(nil, uint32(len(h))), nil
	}
	if len(s.st.tables) > 0 {
		return nil, fmt.Errorf("shard: a copy of %d sparse tables: replicated shards hold dense variables only", len(s.st.tables))
	}
	h := copyHeader{Layout: s.st.layout, Tracker: s.st.tracker.Copy(), Done: s.DoneWorkers(), Incarnation: s.incarnation, Pending: !s.pendingSince.IsZero()}
	n := 0
	for _, v := range s.st.order {
		h.Updates = append(h.Updates, v.updates)
		n += len(v.value) * (1 + len(v.state) + min(len(v.accum), 1))
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 4+len(hb)+4*n)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(hb)))
	out = append(out, hb...)
	for _, v := range s.st.order { // values first, as Build fills them
		out = appendFloats(out, v.value)
	}
	for _, v := range s.st.order {
		for _, st := range v.state {
			out = appendFloats(out, st)
		}
		if v.accum != nil {
			out = appendFloats(out, v.accum)
		}
	}
	return out, nil
}

func appendFloats(b []byte, f []float32) []byte {
	for _, x := range f {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// DecodeCopy replaces the shard's state by a copy EncodeCopy made (of
// another copy of this shard): its incarnation too, so that the workers see
// no restart.
func (s *Shard) DecodeCopy(b []byte) error {
	if len(b) < 4 {
		return fmt.Errorf("shard: a copy of %d bytes: too short", len(b))
	}
	hl := int(binary.LittleEndian.Uint32(b))
	if hl > len(b)-4 {
		return fmt.Errorf("shard: a copy's header of %d bytes in %d", hl, len(b)-4)
	}
	var h copyHeader
	if err := json.Unmarshal(b[4:4+hl], &h); err != nil {
		return fmt.Errorf("shard: a copy's header: %w", err)
	}
	rest := b[4+hl:]
	take := func(dst []float32) error {
		if len(rest) < 4*len(dst) {
			return fmt.Errorf("shard: a copy cut short: %d bytes left, %d wanted", len(rest), 4*len(dst))
		}
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(rest[4*i:]))
		}
		rest = rest[4*len(dst):]
		return nil
	}
	done := map[int]bool{}
	for _, w := range h.Done {
		done[w] = true
	}
	if h.Layout.Vars == nil && h.Layout.Optimizer.Name == "" {
		s.st, s.incarnation, s.done = nil, h.Incarnation, done
		s.epoch++
		s.version++
		return nil
	}
	if len(h.Updates) != len(h.Layout.Vars) {
		return fmt.Errorf("shard: a copy with %d update counts for %d variables", len(h.Updates), len(h.Layout.Vars))
	}
	st, err := Build(h.Layout, func(_ int, dst []float32) error { return take(dst) })
	if err != nil {
		return fmt.Errorf("shard: a copy: %w", err)
	}
	for i, v := range st.order {
		v.updates = h.Updates[i]
		for _, slot := range v.state {
			if err := take(slot); err != nil {
				return err
			}
		}
		if v.accum != nil {
			if err := take(v.accum); err != nil {
				return err
			}
		}
	}
	if len(rest) != 0 {
		return fmt.Errorf("shard: %d bytes after a copy's tensors", len(rest))
	}
	if err := st.tracker.Restore(h.Tracker); err != nil {
		return err
	}
	st.layout.Vars = slices.Clone(h.Layout.Vars)
	s.st, s.incarnation, s.done = st, h.Incarnation, done
	s.pendingSince, s.syncFailed = time.Time{}, nil
	if h.Pending {
		s.pendingSince = time.Now()
	}
	s.epoch++
	s.version++
	return nil
}
