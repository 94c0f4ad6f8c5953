package telemetry

import "net"

// ListenAddr is where a task's metrics address addr is served. The
// endpoint and the status page are plain HTTP and show paths and hosts:
// when the task authenticates its connections (auth: --tls_dir,
// --auth_token_file, or Auth in the Go and Python APIs), an address of no
// host or of every interface (":9100", "0.0.0.0:9100") is bound to
// loopback only, said through logf, and an explicit other host is served
// as asked with a warning (issue 28: they were served in clear to anyone
// under --tls_dir). Without auth, addr is served as it is. A nil logf
// says nothing.
func ListenAddr(addr string, auth bool, logf func(string, ...any)) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !auth {
		return addr
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	switch ip := net.ParseIP(host); {
	case host == "" || (ip != nil && ip.IsUnspecified()):
		lo := net.JoinHostPort("127.0.0.1", port)
		logf("metrics and the status page are plain HTTP: as this task's connections are authenticated (TLS or a token), the metrics address %s serves them on %s only (give a host's address to serve them there, in clear)", addr, lo)
		return lo
	case host != "localhost" && (ip == nil || !ip.IsLoopback()):
		logf("WARNING: metrics and the status page at %s are plain HTTP, readable by anyone who reaches it, although this task's connections require authentication", addr)
	}
	return addr
}
