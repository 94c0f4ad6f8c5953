package cli

import (
	"flag"
	"io"
	"testing"

	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/trainer"
)

// The result file's flags show the hyper-parameters in force: Adam's
// beta1 and beta2 as 0.9 and 0.999 where the flags were left at 0 (their
// default), and a value given explicitly as given.
func TestRecordShowsHyperParametersInForce(t *testing.T) {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := defineTrainFlags(fs)
	if err := fs.Parse([]string{"--optimizer=adam", "--epsilon=1e-7"}); err != nil {
		t.Fatal(err)
	}
	r := f.record(trainer.Config{Config: lifecycle.Config{Optimizer: optim.Config{Name: "adam", LearningRate: 0.01, Epsilon: 1e-7}}})
	for flagName, want := range map[string]string{"beta1": "0.9", "beta2": "0.999", "epsilon": "1e-07", "learning_rate": "0.01"} {
		if r[flagName] != want {
			t.Errorf("record: %s = %q, want %q (the value in force)", flagName, r[flagName], want)
		}
	}
}
