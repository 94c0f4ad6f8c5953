package cluster

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
)

func FuzzParseTFConfig(f *testing.F) {
	for _, s := range []string{
		tfWorker1, tfPS0, tfChief, tfChiefW1, tfMaster, tfEval, tfIPv6, tfTwoWorkers,
		`{"cluster":{"chief":["c:1"],"ps":["p:1"],"worker":["w:1"]},"task":{"type":"worker","index":1}}`,
		`{"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":{"type":"ps","index":-1}}`,
		`{"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":{"type":"worker","index":"0"}}`,
		`{"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":{"type":"worker","index":0.5}}`,
		`{"cluster":{"ps":["p:1"],"worker":["p:1"]},"task":{"type":"worker"}}`,
		`{"cluster":{"ps":["[::1]:1"],"worker":["[0::1]:1"]},"task":{"type":"ps"}}`,
		`{"cluster":{"ps":[]},"task":null}`,
		`{"cluster":{"ps":}}`, `[]`, `null`, ``, `{}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tc, err := ParseTFConfig(s)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !strings.HasPrefix(e.Source, "TF_CONFIG") {
				t.Fatalf("ParseTFConfig error %q: want an *Error from TF_CONFIG", err)
			}
		} else {
			if tc.Job != "" && tc.Job != JobPS && tc.Job != JobWorker {
				t.Fatalf("Job = %q", tc.Job)
			}
			if tc.IndexSet && tc.Index < 0 {
				t.Fatalf("Index = %d", tc.Index)
			}
			if tc.Chief != "" && (len(tc.Workers) == 0 || !tc.WorkersSet) {
				t.Fatalf("Chief %q but Workers %q", tc.Chief, tc.Workers)
			}
			for _, h := range append(append([]string(nil), tc.PS...), tc.Workers...) {
				checkAddr(t, h)
			}
		}

		c, err := Resolve(Flags{}, s)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Resolve error %q is a %T, want *Error", err, err)
			}
			return
		}
		// A nil error means a valid Config, checked here without the
		// package's own validation.
		if len(c.Spec.PS) == 0 || len(c.Spec.Workers) == 0 {
			t.Fatalf("empty job in %+v", c.Spec)
		}
		hosts := c.Spec.Workers
		switch c.Task.Job {
		case JobWorker:
		case JobPS:
			hosts = c.Spec.PS
		default:
			t.Fatalf("Job = %q", c.Task.Job)
		}
		if c.Task.Index < 0 || c.Task.Index >= len(hosts) {
			t.Fatalf("Index %d out of range for %d %s tasks", c.Task.Index, len(hosts), c.Task.Job)
		}
		if c.Addr() != hosts[c.Task.Index] {
			t.Fatalf("Addr() = %q", c.Addr())
		}
		seen := map[string]bool{}
		for _, h := range append(append([]string(nil), c.Spec.PS...), c.Spec.Workers...) {
			checkAddr(t, h)
			if seen[h] {
				t.Fatalf("duplicate %q in %+v", h, c.Spec)
			}
			seen[h] = true
		}
		if c.Task.Index != tc.Index || c.Task.Job != tc.Job {
			t.Fatalf("Resolve gave %v, ParseTFConfig %s %d", c.Task, tc.Job, tc.Index)
		}
	})
}

// checkAddr fails unless h is host:port with a host and a port in 1..65535.
func checkAddr(t *testing.T, h string) {
	t.Helper()
	host, port, err := net.SplitHostPort(h)
	n, perr := strconv.Atoi(port)
	if err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		t.Fatalf("accepted bad address %q", h)
	}
}
