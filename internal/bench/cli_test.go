package bench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/cli"
)

// Bad flag values exit 2 with a message naming the flag, before anything
// starts.
func TestBenchFlagErrors(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--dense_bytes=1M,3", "--dense_bytes"},
		{"--dense_bytes=lots", "--dense_bytes"},
		{"--sparse_keys=0", "--sparse_keys"},
		{"--sparse_keys=1.5M", "--sparse_keys"},
		{"--dim=0", "--dim"},
		{"--cases=tiny,huge", "--cases"},
		{"--op=push,poll", "--op"},
		{"--ps=0", "--ps"},
		{"--reps=-1", "--reps"},
		{"--mem_bytes=7", "--mem_bytes"},
		{"--auth=none,ssl", "--auth"},
		{"stray", "unexpected argument"},
	} {
		var stdout, stderr bytes.Buffer
		code := cli.Main(context.Background(), append([]string{"bench"}, strings.Fields(tc.args)...), &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("bench %s: exit %d, stderr %q; want 2 and a message with %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
