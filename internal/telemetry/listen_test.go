package telemetry

import (
	"strings"
	"testing"
)

// Issue 28 (minor): under --tls_dir the metrics and the status page were
// served in clear on every interface (and still were by the Go and Python
// APIs' MetricsAddr under their Auth). With authentication, an address of
// no host or every interface is bound to loopback; an explicit host is
// served as asked, with a warning; without authentication nothing changes.
func TestMetricsListenAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		auth bool
		want string
		log  string
	}{
		{":9100", true, "127.0.0.1:9100", "serves them on 127.0.0.1:9100 only"},
		{"0.0.0.0:9100", true, "127.0.0.1:9100", "only"},
		{"[::]:0", true, "127.0.0.1:0", "only"},
		{"10.0.0.5:9100", true, "10.0.0.5:9100", "WARNING"},
		{"127.0.0.1:9100", true, "127.0.0.1:9100", ""},
		{"localhost:9100", true, "localhost:9100", ""},
		{":9100", false, ":9100", ""},
	} {
		var logged []string
		got := ListenAddr(tc.addr, tc.auth, func(f string, a ...any) { logged = append(logged, f) })
		all := strings.Join(logged, "\n")
		if got != tc.want || (tc.log == "") != (all == "") {
			t.Errorf("ListenAddr(%q, %v) = %q, logged %q; want %q", tc.addr, tc.auth, got, all, tc.want)
		}
	}
}
