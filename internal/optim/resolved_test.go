package optim

import (
	"reflect"
	"testing"
)

// Resolved writes out exactly the defaults New fills in: the rule built
// from the resolved config is the rule built from the zeros, for every rule
// (a default Resolved got wrong would build another rule), and Adam's
// record shows 0.9 and 0.999 where the flags held 0.
func TestResolvedIsWhatNewFillsIn(t *testing.T) {
	for _, name := range Names() {
		cfg := Config{Name: name, LearningRate: 0.01}
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(Resolved(cfg))
		if err != nil {
			t.Fatalf("%s: New(Resolved(cfg)): %v", name, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: New(Resolved(cfg)) = %+v, New(cfg) = %+v", name, b, a)
		}
		// Every non-zero number the rule holds is one the resolved config
		// names: a default Resolved does not write out would show here.
		r := Resolved(cfg)
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
	r := Resolved(Config{Name: "adam", LearningRate: 0.01})
	if r.Beta1 != 0.9 || r.Beta2 != 0.999 || r.Epsilon != 1e-8 {
		t.Errorf("Resolved(adam) = %+v, want beta1 0.9, beta2 0.999, epsilon 1e-8", r)
	}
}
