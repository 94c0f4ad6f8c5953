package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
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
	days := fs.Int("valid_days", 365, "days the CA and the certificates are valid, 1 to 36500")
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
	if *days < 1 || *days > maxValidDays {
		return fail("--valid_days=%d: want 1 to %d", *days, maxValidDays)
	}
	if err := checkSecretName(*secret); err != nil {
		return fail("--secret_name=%q: %v", *secret, err)
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
	for _, l := range []struct {
		flag  string
		hosts []string
	}{{"ps_hosts", ps}, {"worker_hosts", workers}} {
		for i, h := range l.hosts {
			if err := checkCertHost(h); err != nil {
				return fail("--%s: entry %d %q: %v", l.flag, i+1, h, err)
			}
		}
	}
	if err := checkOutDir(*out); err != nil {
		return fail("--out=%s: %v", *out, err)
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

// maxValidDays bounds --valid_days: 100 years, well inside what a
// time.Duration holds (about 292 years) and what X.509 dates encode.
const maxValidDays = 36500

// checkCertHost checks that a host named for a certificate, with or
// without its port, is an IP address or a DNS name: labels of letters,
// digits, hyphens and underscores (Docker's service names), not starting
// or ending with a hyphen.
func checkCertHost(addr string) error {
	h := addr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		h = host
	}
	h = strings.Trim(h, "[]")
	if net.ParseIP(h) != nil {
		return nil
	}
	if len(h) == 0 || len(h) > 253 {
		return fmt.Errorf("want an IP address or a DNS name of 1 to 253 characters")
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		ok := len(label) >= 1 && len(label) <= 63 && label[0] != '-' && label[len(label)-1] != '-'
		for _, c := range label {
			ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_')
		}
		if !ok {
			return fmt.Errorf("label %q: want an IP address or a DNS name (labels of letters, digits, '-' and '_', 1 to 63 long, no '-' at either end)", label)
		}
	}
	return nil
}

// checkSecretName checks a Kubernetes object name (RFC 1123 subdomain):
// lower-case letters, digits, '-' and '.', starting and ending with a
// letter or digit, at most 253 characters.
func checkSecretName(name string) error {
	ok := len(name) >= 1 && len(name) <= 253
	for i, c := range name {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		ok = ok && (alnum || (c == '-' || c == '.') && i > 0 && i < len(name)-1)
	}
	if !ok {
		return fmt.Errorf("want a Kubernetes name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters")
	}
	return nil
}

// checkOutDir checks that dir is a directory that takes new files, or can
// be made: input to fix (exit 2) before any key is made.
func checkOutDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("is not a directory")
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil { // as secure.MakeCerts makes it
			return fmt.Errorf("cannot make it: %v", errors.Unwrap(err))
		}
	case err != nil:
		return errors.Unwrap(err)
	}
	tmp, err := os.CreateTemp(dir, ".paramserv-write-probe-*")
	if err != nil {
		return fmt.Errorf("cannot write in it: %v", errors.Unwrap(err))
	}
	tmp.Close()
	return os.Remove(tmp.Name())
}
