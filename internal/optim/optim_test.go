package optim

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	want := []string{"adadelta", "adagrad", "adagrad_da", "adam", "adamw", "ftrl", "lamb", "momentum",
		"proximal_adagrad", "proximal_sgd", "rmsprop", "sgd"}
	if got := Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
}

func TestNewUnknown(t *testing.T) {
	_, err := New(Config{Name: "adamax", LearningRate: 0.1})
	if !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), `"adamax"`) || !strings.Contains(err.Error(), "adam") {
		t.Errorf("New(adamax) = %v, want ErrUnknown naming adamax and listing the known rules", err)
	}
}

func TestNewCaseInsensitive(t *testing.T) {
	r := mustNew(t, Config{Name: "Adam", LearningRate: 0.1})
	if r.Name() != "adam" {
		t.Errorf("New(Adam).Name() = %q, want adam", r.Name())
	}
}

// TestNewInvalid: every out-of-range hyper-parameter is a *ConfigError that
// names the field and the value, and wraps ErrInvalidConfig.
func TestNewInvalid(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		cfg   Config
		field string
		value string
	}{
		{Config{Name: "sgd"}, "learning_rate", "0"},
		{Config{Name: "sgd", LearningRate: -0.1}, "learning_rate", "-0.1"},
		{Config{Name: "adam", LearningRate: nan}, "learning_rate", "NaN"},
		{Config{Name: "adam", LearningRate: inf}, "learning_rate", "+Inf"},
		{Config{Name: "momentum", LearningRate: 0.1, Momentum: -0.9}, "momentum", "-0.9"},
		{Config{Name: "momentum", LearningRate: 0.1, Momentum: inf}, "momentum", "+Inf"},
		{Config{Name: "adagrad", LearningRate: 0.1, InitialAccumulator: -1}, "initial_accumulator", "-1"},
		{Config{Name: "adagrad", LearningRate: 0.1, Epsilon: nan}, "epsilon", "NaN"},
		{Config{Name: "adam", LearningRate: 0.1, Beta1: 1}, "beta1", "1"},
		{Config{Name: "adam", LearningRate: 0.1, Beta1: -0.5}, "beta1", "-0.5"},
		{Config{Name: "adam", LearningRate: 0.1, Beta2: 1.5}, "beta2", "1.5"},
		{Config{Name: "adam", LearningRate: 0.1, Epsilon: -1e-8}, "epsilon", "-1e-08"},
		{Config{Name: "ftrl", LearningRate: 0.1, FTRLBeta: -1}, "ftrl_beta", "-1"},
		{Config{Name: "ftrl", LearningRate: 0.1, L1: -1}, "l1", "-1"},
		{Config{Name: "ftrl", LearningRate: 0.1, L2: inf}, "l2", "+Inf"},
		// Fields a rule does not use are checked too: a typo'd config
		// should not pass quietly.
		{Config{Name: "sgd", LearningRate: 0.1, Beta2: 2}, "beta2", "2"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want a *ConfigError wrapping ErrInvalidConfig", tt.cfg, err)
			continue
		}
		if ce.Field != tt.field || !strings.Contains(err.Error(), tt.field+" = "+tt.value) ||
			!strings.Contains(err.Error(), tt.cfg.Name) {
			t.Errorf("New(%+v) = %q, want it to name %s = %s", tt.cfg, err, tt.field, tt.value)
		}
	}
}

// TestNewValidEdges: values at the edge of the ranges are accepted.
func TestNewValidEdges(t *testing.T) {
	for _, cfg := range []Config{
		{Name: "adam", LearningRate: 1e-30, Beta1: 0.999999, Beta2: math.Nextafter(1, 0)},
		{Name: "ftrl", LearningRate: 1e30, L1: 1e30, L2: 0, FTRLBeta: 1e-30},
		{Name: "momentum", LearningRate: 0.1, Momentum: 1.5}, // unwise, but TF allows it
	} {
		if _, err := New(cfg); err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}
