package placement

import (
	"slices"
	"testing"

	"github.com/paramserv/paramserv/internal/model"
)

// TestPartShapesAreOwn: each part's Shape is its own slice, whole or split,
// so code that edits a part's shape (a request, a re-sharding plan) changes
// neither the variable's shape nor the caller's.
func TestPartShapesAreOwn(t *testing.T) {
	vars := []model.Variable{{Name: "small", Shape: []int{2, 3}}, {Name: "big", Shape: []int{10, 3}}}
	plan, err := Place(2, vars, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range plan.Vars {
		for i := range v.Parts {
			v.Parts[i].Shape[0] = 99
		}
	}
	if !slices.Equal(vars[0].Shape, []int{2, 3}) || !slices.Equal(vars[1].Shape, []int{10, 3}) {
		t.Errorf("editing the parts' shapes changed the caller's: %v, %v", vars[0].Shape, vars[1].Shape)
	}
	if !slices.Equal(plan.Vars[0].Shape, []int{2, 3}) || !slices.Equal(plan.Vars[1].Shape, []int{10, 3}) {
		t.Errorf("editing the parts' shapes changed the plan's variables: %v, %v", plan.Vars[0].Shape, plan.Vars[1].Shape)
	}
}
