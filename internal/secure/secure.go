package secure

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Files names what a task reads to authenticate its connections. Cert, Key
// and CA, when set, win over the files of Dir.
type Files struct {
	Cert, Key, CA string // PEM files: this task's certificate and key, the CA's certificate
	Dir           string // a directory as `paramserv certs` writes it
	TokenFile     string // the shared secret, the same file on every task
}

// TLS reports whether the files ask for TLS.
func (f Files) TLS() bool { return f.Cert != "" || f.Key != "" || f.CA != "" || f.Dir != "" }

// Any reports whether the files ask for any authentication.
func (f Files) Any() bool { return f.TLS() || f.TokenFile != "" }

// CAFile, CertFile and KeyFile are the names `paramserv certs` writes in its
// directory: the CA's certificate and each task's certificate and key,
// "ps-0.crt", "worker-1.key".
const CAFile = "ca.crt"

// CertFile is the name of the certificate of task job/index in a directory.
func CertFile(job string, index int) string { return fmt.Sprintf("%s-%d.crt", job, index) }

// KeyFile is the name of the key of task job/index in a directory.
func KeyFile(job string, index int) string { return fmt.Sprintf("%s-%d.key", job, index) }

// MinTokenBytes is the shortest token accepted.
const MinTokenBytes = 16

// DefaultHandshakeTimeout bounds a connection's TLS and token handshakes.
const DefaultHandshakeTimeout = 10 * time.Second

// Policy is what a task requires of its connections and presents to its
// peers. It is immutable after Load and safe for concurrent use.
type Policy struct {
	server *tls.Config // nil without TLS
	client *tls.Config // ServerName set per dial
	token  []byte      // nil without a token
	name   string      // this task's certificate subject, for logs

	// HandshakeTimeout bounds each connection's handshakes (default
	// DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
}

// TLS and Token report what the policy requires.
func (p *Policy) TLS() bool   { return p != nil && p.server != nil }
func (p *Policy) Token() bool { return p != nil && p.token != nil }

// String says what the policy requires, for the start-up log.
func (p *Policy) String() string {
	var parts []string
	if p.TLS() {
		parts = append(parts, fmt.Sprintf("mutual TLS 1.3 (this task's certificate: %s)", p.name))
	}
	if p.Token() {
		parts = append(parts, "a shared token")
	}
	if len(parts) == 0 {
		return "no authentication"
	}
	return strings.Join(parts, " and ")
}

// Load reads the files for task job/index, whose own address is host (a
// ps's certificate must name it, or every worker would refuse it). A
// missing or malformed file, a certificate the CA did not sign, or one that
// does not name host is an error to fix before the task starts. Load with
// no files returns nil, nil.
func Load(f Files, job string, index int, host string) (*Policy, error) {
	if !f.Any() {
		return nil, nil
	}
	p := &Policy{HandshakeTimeout: DefaultHandshakeTimeout}
	if f.TokenFile != "" {
		tok, err := readToken(f.TokenFile)
		if err != nil {
			return nil, err
		}
		p.token = tok
	}
	if !f.TLS() {
		return p, nil
	}
	cert, key, ca := f.Cert, f.Key, f.CA
	if f.Dir != "" {
		if cert == "" {
			cert = filepath.Join(f.Dir, CertFile(job, index))
		}
		if key == "" {
			key = filepath.Join(f.Dir, KeyFile(job, index))
		}
		if ca == "" {
			ca = filepath.Join(f.Dir, CAFile)
		}
	}
	switch {
	case cert == "" || key == "" || ca == "":
		return nil, fmt.Errorf("--tls_cert, --tls_key and --tls_ca go together (or --tls_dir alone): have cert %q, key %q, ca %q", cert, key, ca)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("the certificate of %s %d (%s, %s): %w", job, index, cert, key, err)
	}
	caPEM, err := os.ReadFile(ca)
	if err != nil {
		return nil, fmt.Errorf("the CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("the CA certificate %s: no PEM certificate in it", ca)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("the certificate %s: %w", cert, err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, fmt.Errorf("the certificate %s is not accepted by the CA %s, so every peer would refuse this task: %w", cert, ca, err)
	}
	if job == "ps" && host != "" {
		if err := leaf.VerifyHostname(host); err != nil {
			return nil, fmt.Errorf("the certificate %s does not name this ps's host %q (it names %s), so every worker would refuse it: make the certificates for this cluster (paramserv certs)", cert, host, names(leaf))
		}
	}
	switch t, ok := TaskOf(leaf); {
	case !ok:
		return nil, fmt.Errorf("the certificate %s names no task (want a URI %s or a Common Name %s-%d), so no peer would know what it may do: make the certificates with paramserv certs", cert, TaskURI(job, index), job, index)
	case t != (Task{Job: job, Index: index}):
		return nil, fmt.Errorf("the certificate %s is %s's, not this task's (%s %d): give each task its own (--tls_dir picks %s)", cert, t, job, index, CertFile(job, index))
	}
	p.name = fmt.Sprintf("%s, for %s", leaf.Subject.CommonName, names(leaf))
	p.server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		// Connections are long-lived and clients keep no session cache:
		// tickets would be bytes sent for nothing.
		SessionTicketsDisabled: true,
	}
	p.client = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		RootCAs:      pool,
	}
	return p, nil
}

func names(c *x509.Certificate) string {
	var n []string
	n = append(n, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		n = append(n, ip.String())
	}
	if len(n) == 0 {
		return "no host"
	}
	return strings.Join(n, ", ")
}

// MaxTokenFileBytes bounds the --auth_token_file read.
const MaxTokenFileBytes = 4096

func readToken(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--auth_token_file: %w", err)
	}
	defer f.Close()
	// Read at most a byte more than a token may have: a device that never
	// ends (/dev/zero) or a large file named by mistake is refused, not
	// read into memory.
	b, err := io.ReadAll(io.LimitReader(f, MaxTokenFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--auth_token_file: %w", err)
	}
	if len(b) > MaxTokenFileBytes {
		return nil, fmt.Errorf("--auth_token_file %s: longer than %d bytes; a token is a short secret, e.g. head -c 32 /dev/urandom | base64 > FILE", path, MaxTokenFileBytes)
	}
	b = bytes.TrimSpace(b)
	if len(b) < MinTokenBytes {
		return nil, fmt.Errorf("--auth_token_file %s: the token has %d bytes (surrounding white space dropped); want at least %d, e.g. head -c 32 /dev/urandom | base64 > %s", path, len(b), MinTokenBytes, path)
	}
	return b, nil
}

// Listener wraps lis so that every connection it accepts proves itself
// (TLS, token) before its first byte is read; a refused one is logged
// through logf (once per peer, then at most once a minute) and fails its
// first Read. A nil policy returns lis.
func (p *Policy) Listener(lis net.Listener, logf func(string, ...any)) net.Listener {
	if p == nil || !p.Any() {
		return lis
	}
	return &listener{Listener: lis, p: p, refused: newRefusals(logf)}
}

// Any reports whether the policy requires anything.
func (p *Policy) Any() bool { return p.TLS() || p.Token() }

// Dialer wraps dial (nil: TCP) so that every connection it makes proves
// itself to the ps and checks the ps's proof before it is returned. A nil
// policy returns dial.
func (p *Policy) Dialer(dial func(ctx context.Context, addr string) (net.Conn, error)) func(ctx context.Context, addr string) (net.Conn, error) {
	if p == nil || !p.Any() {
		return dial
	}
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		raw, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		c, err := p.clientHandshake(ctx, raw, addr)
		if err != nil {
			raw.Close()
			return nil, err
		}
		return c, nil
	}
}

func (p *Policy) timeout() time.Duration {
	if p.HandshakeTimeout > 0 {
		return p.HandshakeTimeout
	}
	return DefaultHandshakeTimeout
}

// clientHandshake runs TLS, then the token, on raw as a client of the ps
// at addr.
func (p *Policy) clientHandshake(ctx context.Context, raw net.Conn, addr string) (net.Conn, error) {
	deadline := time.Now().Add(p.timeout())
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = raw.SetDeadline(deadline)
	var c net.Conn = raw
	if p.TLS() {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg := p.client.Clone()
		cfg.ServerName = host
		tc := newTLSConn(raw, false, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, &HandshakeError{Addr: addr, Step: "TLS", Why: tlsWhy(err), Err: err}
		}
		// Only a ps serves: a worker's certificate, valid as it is, does
		// not make its holder a ps to this task.
		if t, ok := PeerTask(tc); !ok || t.Job != "ps" {
			who := "names no task"
			if ok {
				who = "is " + t.String() + "'s"
			}
			return nil, &HandshakeError{Addr: addr, Step: "TLS", Why: "the peer is not a ps (its certificate " + who + ")", Err: ErrNotPS}
		}
		c = tc
	}
	if p.Token() {
		if err := clientToken(c, p.token); err != nil {
			return nil, &HandshakeError{Addr: addr, Step: "token", Why: tokenWhy(err), Err: err}
		}
	}
	_ = raw.SetDeadline(time.Time{})
	return c, nil
}

// ErrNotPS is a dial whose peer proved a certificate that is not a ps's.
var ErrNotPS = errors.New("secure: the peer's certificate is not a ps's")

// HandshakeError is a connection to a ps that failed to authenticate. Its
// message leads with what to check, since callers cut long messages.
type HandshakeError struct {
	Addr string // the ps
	Step string // "TLS" or "token"
	Why  string // what went wrong, in a few words
	Err  error
}

func (e *HandshakeError) Error() string {
	return fmt.Sprintf("%s: %s (ps %s: %v)", e.Step, e.Why, e.Addr, e.Err)
}

func (e *HandshakeError) Unwrap() error { return e.Err }

func tlsWhy(err error) string {
	var ce *tls.CertificateVerificationError
	var he x509.HostnameError
	switch {
	case errors.As(err, &he):
		return "the ps's certificate is for other hosts (make certificates for the hosts in the cluster)"
	case errors.As(err, &ce):
		return "the ps's certificate is not from this task's CA (same --tls_dir or --tls_ca on every task?)"
	case strings.Contains(err.Error(), "first record does not look like a TLS handshake"), isTimeout(err):
		return "the ps does not speak TLS (does it have --tls_dir?)"
	}
	return "the ps refused this task's certificate (same --tls_dir or --tls_ca on every task?)"
}

func tokenWhy(err error) string {
	switch {
	case errors.Is(err, errNoChallenge):
		return "the ps sent no challenge (does it have --auth_token_file?)"
	case errors.Is(err, errRefused):
		return "the ps refused this task's proof (same --auth_token_file on every task?)"
	case errors.Is(err, errPSProof):
		return "the ps's proof does not match this task's token"
	}
	return "the handshake failed"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// The environment variables that carry Files to a program of the user's
// own (`paramserv local -- CMD` sets them for each worker; the Python
// binding and the public Go API read them when given no files).
const (
	EnvTLSDir    = "PARAMSERV_TLS_DIR"
	EnvTLSCert   = "PARAMSERV_TLS_CERT"
	EnvTLSKey    = "PARAMSERV_TLS_KEY"
	EnvTLSCA     = "PARAMSERV_TLS_CA"
	EnvTokenFile = "PARAMSERV_AUTH_TOKEN_FILE"
)

// Env is f as environment variables (those set), paths made absolute so a
// program started in another directory finds them.
func (f Files) Env() []string {
	var env []string
	for _, e := range []struct{ name, val string }{
		{EnvTLSDir, f.Dir}, {EnvTLSCert, f.Cert}, {EnvTLSKey, f.Key}, {EnvTLSCA, f.CA}, {EnvTokenFile, f.TokenFile},
	} {
		if e.val == "" {
			continue
		}
		if abs, err := filepath.Abs(e.val); err == nil {
			e.val = abs
		}
		env = append(env, e.name+"="+e.val)
	}
	return env
}

// FilesFromEnv reads Files from the environment variables above.
func FilesFromEnv(getenv func(string) string) Files {
	return Files{Dir: getenv(EnvTLSDir), Cert: getenv(EnvTLSCert), Key: getenv(EnvTLSKey), CA: getenv(EnvTLSCA), TokenFile: getenv(EnvTokenFile)}
}
