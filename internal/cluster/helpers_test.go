package cluster

import (
	"errors"
	"strings"
	"testing"
)

// wantErr checks that err is an *Error from source whose message holds
// every piece.
func wantErr(t *testing.T, err error, source string, pieces ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one from %s mentioning %q", source, pieces)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %T %q, want *cluster.Error", err, err)
	}
	if e.Source != source {
		t.Errorf("error %q: Source = %q, want %q", err, e.Source, source)
	}
	for _, p := range pieces {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}
