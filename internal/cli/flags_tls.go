package cli

import (
	"context"
	"flag"
	"net"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/secure"
)

// tlsFlags are the authentication flags of `paramserv train` (and `local`,
// which passes them to every task).
type tlsFlags struct {
	files secure.Files
}

func defineTLSFlags(fs *flag.FlagSet) *tlsFlags {
	t := &tlsFlags{}
	fs.StringVar(&t.files.Cert, "tls_cert", "", "mutual TLS: this task's certificate (PEM); with --tls_key and --tls_ca")
	fs.StringVar(&t.files.Key, "tls_key", "", "mutual TLS: this task's private key (PEM)")
	fs.StringVar(&t.files.CA, "tls_ca", "", "mutual TLS: the CA certificate every peer's certificate must chain to (PEM)")
	fs.StringVar(&t.files.Dir, "tls_dir", "", "mutual TLS: a directory made by paramserv certs, the same for every task; each task reads ca.crt and its own JOB-INDEX.crt and .key (ps-0.crt, worker-1.key)")
	fs.StringVar(&t.files.TokenFile, "auth_token_file", "", "a file holding a shared secret (at least 16 bytes), the same on every task: every connection proves it before any request is read")
	return t
}

// apply loads the policy for cfg's task and wraps cfg's listener and dialer
// with it; errors are the user's to fix. A ps that listens beyond loopback
// without any authentication says so loudly.
func (t *tlsFlags) apply(cfg *taskConfig, logf func(string, ...any)) error {
	task := cfg.Cluster.Task
	host := hostOf(cfg.Cluster.Addr())
	p, err := secure.Load(t.files, string(task.Job), task.Index, host)
	if err != nil {
		return err
	}
	if p == nil {
		if task.Job == cluster.JobPS && !isLoopback(host) {
			logf("WARNING: this ps listens on %s, not a loopback address, with no authentication: anyone who can reach the port can read every parameter, push updates, restore checkpoints and end the job. Give every task --tls_dir (made by paramserv certs) or --auth_token_file.", cfg.Cluster.Addr())
		}
		return nil
	}
	logf("connections require %s", p)
	baseListen := cfg.PS.Listen
	cfg.PS.Listen = func(addr string) (net.Listener, error) {
		var lis net.Listener
		var err error
		if baseListen != nil {
			lis, err = baseListen(addr)
		} else {
			var lc net.ListenConfig
			lis, err = lc.Listen(context.Background(), "tcp", addr)
		}
		if err != nil {
			return nil, err
		}
		return p.Listener(lis, logf), nil
	}
	cfg.Dial = p.Dialer(cfg.Dial)
	cfg.PS.Dial = p.Dialer(cfg.PS.Dial)
	return nil
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
