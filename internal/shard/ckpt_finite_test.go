package shard

import (
	"math"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/checkpoint"
)

// Initial values not finite are refused: they would reach every checkpoint
// (before, Init took +Inf and the first checkpoint held it).
func TestInitRefusesNonFinite(t *testing.T) {
	for _, x := range []float32{float32(math.Inf(1)), float32(math.NaN())} {
		s := New(Config{NumWorkers: 1})
		_, err := s.Init(sparseLayout(false, 1), [][]float32{{x}})
		if err == nil || !strings.Contains(err.Error(), `variable "w"`) || !strings.Contains(err.Error(), "finite") {
			t.Fatalf("Init with %v: %v, want a refusal naming w", x, err)
		}
		if s.st != nil {
			t.Fatalf("Init with %v installed a state", x)
		}
	}
}

// A replica copy refuses an aggregate whose update would not be finite
// (dense or rows), changes nothing, and its checkpoint stays finite.
func TestAggregateRefusesNonFinite(t *testing.T) {
	s := New(Config{NumWorkers: 2})
	if _, err := s.Init(sparseLayout(true, 2), [][]float32{{-3e38}}); err != nil {
		t.Fatal(err)
	}
	rows := []RowGrads{{Keys: []uint64{4}, Values: []float32{1, 1}}}
	if err := s.ApplyAggregate(0, [][]float32{{3e38}}, rows); err == nil || !strings.Contains(err.Error(), `variable "w"`) {
		t.Fatalf("an aggregate that makes w -Inf: %v, want a refusal naming w", err)
	}
	if err := s.ApplyAggregate(0, [][]float32{{0}}, []RowGrads{{Keys: []uint64{4, 4}, Values: []float32{3e38, 0, 3e38, 0}}}); err == nil || !strings.Contains(err.Error(), `table "emb"`) {
		t.Fatalf("an aggregate that makes row 4 -Inf: %v, want a refusal naming emb", err)
	}
	if s.Step() != 0 || s.Var("w").value[0] != -3e38 || s.st.tables["emb"].t.Len() != 0 {
		t.Fatalf("refused aggregates changed the shard: step %d, w %v, %d rows", s.Step(), s.Var("w").value[0], s.st.tables["emb"].t.Len())
	}
	if err := s.ApplyAggregate(0, [][]float32{{1}}, rows); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.CheckFinite(s.Snapshot()); err != nil {
		t.Fatal(err)
	}
}
