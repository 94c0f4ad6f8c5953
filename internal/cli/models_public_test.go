package cli

import (
	"testing"

	"github.com/paramserv/paramserv/internal/catalog"
)

// Every model of the catalog is either built in or a program this command
// line runs, and every program it runs is in the catalog: one list of
// --model names.
func TestEveryProgramRuns(t *testing.T) {
	for _, name := range catalog.Names() {
		e, _ := catalog.Lookup(name)
		if _, ok := programs[name]; ok == e.Builtin() {
			t.Errorf("--model=%s: built in %v, has a program to run %v: want exactly one", name, e.Builtin(), ok)
		}
	}
	for name := range programs {
		if _, err := catalog.Lookup(name); err != nil {
			t.Errorf("program %s: %v", name, err)
		}
	}
}
