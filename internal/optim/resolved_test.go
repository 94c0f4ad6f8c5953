package optim

import (
	"reflect"
	"testing"
)

// Resolved writes out the defaults each rule documents (the table below is
// the one in the rules' doc comments and train --help), and it is the only
// place they are written: the rule New builds from the zeros holds exactly
// the numbers Resolved names, no default of its own. A default dropped from
// Resolved fails the table; a default written back into a constructor would
// hold a number Resolved does not name, or one New(cfg) and a constructor
// given the zeros disagree on.
func TestResolvedIsWhatNewFillsIn(t *testing.T) {
	const lr = 0.01
	ftrlPower := -0.5
	want := map[string]Config{
		"sgd":              {},
		"momentum":         {Momentum: 0.9},
		"adagrad":          {InitialAccumulator: 0.1},
		"adagrad_da":       {InitialAccumulator: 0.1},
		"proximal_adagrad": {InitialAccumulator: 0.1},
		"proximal_sgd":     {},
		"adam":             {Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8},
		"adamw":            {Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8, WeightDecay: 0.01},
		"lamb":             {Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-6},
		"ftrl":             {FTRLBeta: 1, InitialAccumulator: 0.1, LearningRatePower: &ftrlPower},
		"adadelta":         {Rho: 0.95, Epsilon: 1e-8},
		"rmsprop":          {Rho: 0.9, Epsilon: 1e-10, InitialAccumulator: 1},
	}
	for _, name := range Names() {
		cfg := Config{Name: name, LearningRate: lr}
		w, ok := want[name]
		if !ok {
			t.Errorf("%s: a rule with no row in this test's table of defaults: add one", name)
			continue
		}
		w.Name, w.LearningRate = name, lr
		r := Resolved(cfg)
		if !reflect.DeepEqual(r, w) {
			t.Errorf("%s: Resolved = %+v, want %+v", name, r, w)
		}
		if again := Resolved(r); !reflect.DeepEqual(again, r) {
			t.Errorf("%s: Resolved(Resolved(cfg)) = %+v, want %+v (a written-out value is kept)", name, again, r)
		}
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The constructor given the zeros as they are builds the rule New
		// builds only if Resolved has nothing to add: for rules with
		// defaults it must differ, or the constructor fills them in itself.
		raw, err := constructors[name](cfg)
		if err != nil {
			t.Fatal(err)
		}
		if same := reflect.DeepEqual(a, raw); same != reflect.DeepEqual(r, cfg) {
			t.Errorf("%s: the constructor given the zeros builds %+v, New builds %+v: the defaults belong in Resolved alone", name, raw, a)
		}
		// Every non-zero number the rule holds is one the resolved config
		// names.
		named := map[float64]bool{0: true}
		rv := reflect.ValueOf(r)
		for i := 0; i < rv.NumField(); i++ {
			switch f := rv.Field(i); {
			case f.Kind() == reflect.Float64:
				named[f.Float()] = true
			case f.Kind() == reflect.Pointer && !f.IsNil() && f.Elem().Kind() == reflect.Float64:
				named[f.Elem().Float()] = true
			}
		}
		av := reflect.ValueOf(a).Elem()
		for i := 0; i < av.NumField(); i++ {
			if f := av.Field(i); f.Kind() == reflect.Float64 && !named[f.Float()] {
				t.Errorf("%s: the rule's %s is %v, which Resolved does not write out", name, av.Type().Field(i).Name, f.Float())
			}
		}
	}
}
