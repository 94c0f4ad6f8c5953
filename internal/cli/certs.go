package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/secure"
)

// Certs is `paramserv certs`: a CA and one certificate per task, for
// --tls_dir.
func Certs(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	psHosts := fs.String("ps_hosts", "", "the ps's addresses (host:port) or hosts, comma-separated (default: TF_CONFIG's cluster)")
	workerHosts := fs.String("worker_hosts", "", "the workers' addresses or hosts, comma-separated, the chief first (default: TF_CONFIG's cluster)")
	out := fs.String("out", "", "the directory to write (made if missing)")
	force := fs.Bool("force", false, "replace a CA key already in --out (every certificate it signed stops being accepted)")
	days := fs.Int("valid_days", 365, "days the CA and the certificates are valid")
	secret := fs.String("secret_name", "paramserv-tls", "the name of the Kubernetes Secret in secret.yaml")
	help := func(w io.Writer) {
		fmt.Fprint(w, `Usage: paramserv certs --ps_hosts=H,... --worker_hosts=H,... --out=DIR

Makes a certificate authority and one certificate and key per task, ECDSA
P-256, each naming its task's host (a DNS name or an IP address) and usable
as server and client, for mutual TLS between every task of the job: start
every task with --tls_dir=DIR (the same directory for all; each reads
ca.crt and its own JOB-INDEX.crt and .key, ps-0.crt, worker-1.key). A host
may repeat (127.0.0.1 for paramserv local); ports are ignored.

Writes ca.crt, ca.key (keep it off the tasks' machines; needed only to
make more certificates), ps-I.crt/.key, worker-I.crt/.key, and
secret.yaml, a Kubernetes Secret of every file but ca.key to mount as
--tls_dir (kubectl apply -f DIR/secret.yaml). Refuses to replace an
existing ca.key without --force.

Flags:
`)
		printFlags(w, fs, false, nil)
	}
	if code, done := parseArgs(fs, args, stdout, stderr, help); done {
		return code
	}
	if code, bad := extraArg(fs, stderr); bad {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "paramserv certs: "+format+"\n", a...)
		return 2
	}
	if *out == "" {
		return fail("--out: want the directory to write")
	}
	if *days < 1 {
		return fail("--valid_days=%d: want at least 1", *days)
	}
	ps, workers := splitHosts(*psHosts), splitHosts(*workerHosts)
	if tf := os.Getenv("TF_CONFIG"); tf != "" && (ps == nil || workers == nil) {
		tc, err := cluster.ParseTFConfig(tf)
		if err != nil {
			return fail("%v", err)
		}
		if ps == nil {
			ps = tc.PS
		}
		if workers == nil {
			workers = tc.Workers
		}
	}
	if ps == nil || workers == nil {
		return fail("want --ps_hosts and --worker_hosts (or TF_CONFIG's cluster): have %d ps and %d workers", len(ps), len(workers))
	}
	written, err := secure.MakeCerts(secure.CertsConfig{
		PS: ps, Workers: workers, Out: *out, Force: *force,
		Valid: time.Duration(*days) * 24 * time.Hour, SecretName: *secret,
	})
	if errors.Is(err, secure.ErrCAExists) {
		return fail("%v", err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "paramserv certs: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %d files for %d ps and %d workers:\n  %s\nstart every task with --tls_dir=%s\n", len(written), len(ps), len(workers), strings.Join(written, "\n  "), *out)
	return 0
}

func splitHosts(list string) []string {
	var hosts []string
	for _, h := range strings.Split(list, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts
}
