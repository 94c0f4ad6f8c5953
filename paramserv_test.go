package paramserv_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv"
)

// A program whose variables differ from those the ps hold gets ErrLayout,
// an input to fix, at once: not a wait for a ps that will never fit. And
// a malformed TF_CONFIG or a ps task is refused with what was expected.
func TestStartRefusesWhatCannotWork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	worker, _ := servePS(t, ctx, paramserv.PSConfig{})
	opt := paramserv.Optimizer{Name: "sgd", LearningRate: 0.1}
	w, err := paramserv.Start(ctx, paramserv.Config{TFConfig: worker, Optimizer: opt,
		Variables: []paramserv.Variable{{Name: "w", Shape: []int{2}}}}, paramserv.Params{"w": {1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, err = paramserv.Start(ctx, paramserv.Config{TFConfig: worker, Optimizer: opt, StartupTimeout: 20 * time.Second,
		Variables: []paramserv.Variable{{Name: "w", Shape: []int{3}}}}, paramserv.Params{"w": {1, 2, 3}})
	if !errors.Is(err, paramserv.ErrLayout) {
		t.Fatalf("a model of another layout: %v, want ErrLayout", err)
	}
	for _, tc := range []struct{ tf, want string }{
		{`{"cluster":`, "TF_CONFIG"},
		{strings.Replace(worker, `"type":"worker"`, `"type":"ps"`, 1), "a program is a worker"},
	} {
		if _, err := paramserv.Start(ctx, paramserv.Config{TFConfig: tc.tf}, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("TF_CONFIG %s: %v, want an error saying %q", tc.tf, err, tc.want)
		}
	}
}
