package placement

import (
	"math"
	"reflect"
	"testing"

	"github.com/paramserv/paramserv/internal/model"
)

func TestRoundRobin(t *testing.T) {
	vars := []model.Variable{{Name: "a", Shape: []int{3}}, {Name: "b", Shape: []int{2, 2}}, {Name: "c", Shape: []int{1}}}
	plan, err := Place(2, vars, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, v := range plan.Vars {
		if len(v.Parts) != 1 {
			t.Fatalf("%s split into %d parts", v.Name, len(v.Parts))
		}
		got = append(got, v.Parts[0].PS)
	}
	if want := []int{0, 1, 0}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ps of a,b,c = %v, want %v", got, want)
	}
	if on1 := plan.OnPS(1); len(on1) != 1 || on1[0].Name != "b" {
		t.Fatalf("OnPS(1) = %+v, want just b", on1)
	}
}

func TestSplitLargeVariable(t *testing.T) {
	// 10 rows of 3: 120 bytes, over a 100-byte threshold, split over 3 ps as 4+3+3 rows.
	vars := []model.Variable{{Name: "w", Shape: []int{10, 3}}, {Name: "b", Shape: []int{3}}}
	plan, err := Place(3, vars, 100)
	if err != nil {
		t.Fatal(err)
	}
	w := plan.Vars[0]
	want := []Part{
		{PS: 0, Name: "w/part_0", Offset: 0, Len: 12, Shape: []int{4, 3}},
		{PS: 1, Name: "w/part_1", Offset: 12, Len: 9, Shape: []int{3, 3}},
		{PS: 2, Name: "w/part_2", Offset: 21, Len: 9, Shape: []int{3, 3}},
	}
	if !reflect.DeepEqual(w.Parts, want) {
		t.Fatalf("parts = %+v\nwant %+v", w.Parts, want)
	}
	// A split variable does not advance round-robin: b goes to ps 0.
	if ps := plan.Vars[1].Parts[0].PS; ps != 0 {
		t.Fatalf("b on ps %d, want 0", ps)
	}
	// Fewer rows than ps: one row per part.
	plan, _ = Place(4, []model.Variable{{Name: "x", Shape: []int{2, 100}}}, 100)
	if n := len(plan.Vars[0].Parts); n != 2 {
		t.Fatalf("2-row variable on 4 ps split into %d parts, want 2", n)
	}
}

func TestPlaceErrors(t *testing.T) {
	for _, tc := range []struct {
		numPS int
		vars  []model.Variable
	}{
		{0, nil},
		{1, []model.Variable{{Name: "", Shape: []int{1}}}},
		{1, []model.Variable{{Name: "a", Shape: []int{1}}, {Name: "a", Shape: []int{2}}}},
		{1, []model.Variable{{Name: "a", Shape: []int{0}}}},
	} {
		if _, err := Place(tc.numPS, tc.vars, 0); err == nil {
			t.Errorf("Place(%d, %+v) succeeded", tc.numPS, tc.vars)
		}
	}
}

func TestKeyShardStableAndBalanced(t *testing.T) {
	// Stability: fixed values that must never change (workers and
	// checkpoints depend on them).
	got := []int{KeyShard(0, 2), KeyShard(1, 2), KeyShard(12345, 3), KeyShard(math.MaxUint64, 5), KeyShard(42, 1000)}
	want := []int{0, 0, 1, 3, 82}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("KeyShard placements changed: got %v, want %v", got, want)
	}
	for _, n := range []int{1, 2, 3, 7} {
		counts := make([]int, n)
		const keys = 100000
		for k := uint64(0); k < keys; k++ {
			s := KeyShard(k, n)
			if s < 0 || s >= n {
				t.Fatalf("KeyShard(%d, %d) = %d", k, n, s)
			}
			counts[s]++
		}
		for s, c := range counts {
			if dev := math.Abs(float64(c)-keys/float64(n)) / (keys / float64(n)); dev > 0.03 {
				t.Errorf("%d shards: shard %d has %d keys, %.1f%% off even", n, s, c, 100*dev)
			}
		}
	}
	// Consistency: going from 3 to 4 shards moves about a quarter of the keys, all to the new shard.
	moved := 0
	for k := uint64(0); k < 100000; k++ {
		a, b := KeyShard(k, 3), KeyShard(k, 4)
		if a != b {
			if b != 3 {
				t.Fatalf("key %d moved from %d to %d, not to the new shard", k, a, b)
			}
			moved++
		}
	}
	if moved < 23000 || moved > 27000 {
		t.Errorf("3→4 shards moved %d of 100000 keys, want about 25000", moved)
	}
}
