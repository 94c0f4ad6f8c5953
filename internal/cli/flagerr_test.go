package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A malformed flag value says what the flag wants, not only the flag
// package's "parse error"; a flag whose own type explains itself keeps its
// message, and every such error exits 2.
func TestFlagValueErrorSaysWhatIsWanted(t *testing.T) {
	for _, c := range []struct{ arg, want string }{
		{"--startup_timeout=5", `invalid value "5" for flag --startup_timeout: parse error (want a duration such as 30s, 5m or 1h30m)`},
		{"--train_steps=1e3", `invalid value "1e3" for flag --train_steps: parse error (want a whole number)`},
		{"--num_features=-1", `invalid value "-1" for flag --num_features: parse error (want a whole number >= 0)`},
		{"--learning_rate=fast", `invalid value "fast" for flag --learning_rate: parse error (want a number such as 0.5 or 1e-3)`},
		{"--sync_replicas=maybe", `invalid boolean value "maybe" for --sync_replicas: parse error (want true or false; --name alone is true)`},
		{"--save_model_secs=x", `invalid value "x" for flag --save_model_secs: want seconds (60) or a duration (1m30s), got "x"`},
		// Before, 1e20 seconds wrapped to a negative interval and turned
		// timed saves off.
		{"--save_model_secs=1e20", `invalid value "1e20" for flag --save_model_secs: want at most 9223372036 seconds (about 292 years), got "1e20"`},
	} {
		for _, cmd := range []string{"train", "local"} {
			var out, errb bytes.Buffer
			if code := Main(context.Background(), []string{cmd, c.arg}, &out, &errb); code != 2 {
				t.Errorf("%s %s: exit %d, want 2", cmd, c.arg, code)
			}
			first, _, _ := strings.Cut(errb.String(), "\n")
			if want := "paramserv " + cmd + ": " + c.want; first != want {
				t.Errorf("%s %s: first line\n%q, want\n%q", cmd, c.arg, first, want)
			}
		}
	}
}

// --batch_size beyond what a batch can sensibly hold is refused before
// anything is allocated (before, 2^31 was accepted and allocated 1.7 GB).
func TestBatchSizeBounded(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"local", "--batch_size=2147483648"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--batch_size=2147483648: want at most 1048576") {
		t.Fatalf("exit %d, want 2 naming the bound:\n%s", code, errb.String())
	}
}
