package secure

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// makeDir writes a CA and certificates for one ps and two workers on
// 127.0.0.1 into a new directory.
func makeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := MakeCerts(CertsConfig{PS: []string{"127.0.0.1:1"}, Workers: []string{"127.0.0.1", "127.0.0.1"}, Out: dir, Valid: time.Hour}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func load(t *testing.T, f Files, job string, i int) *Policy {
	t.Helper()
	p, err := Load(f, job, i, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// logBuf collects log lines.
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) logf(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, a...))
}

func (l *logBuf) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// echoServer serves p's listener on loopback: every connection gets back
// what it sends; received counts the bytes the server's side was given.
type echoServer struct {
	addr  string
	log   logBuf
	mu    sync.Mutex
	ended []ended // connections, as they end
}

type ended struct {
	bytes int   // given to the server
	err   error // that ended it
}

func serveEcho(t testing.TB, p *Policy) *echoServer {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{addr: raw.Addr().String()}
	lis := p.Listener(raw, s.log.logf)
	var wg sync.WaitGroup
	t.Cleanup(func() { lis.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 1024)
				total := 0
				for {
					n, err := c.Read(buf)
					total += n
					if err != nil {
						s.mu.Lock()
						s.ended = append(s.ended, ended{total, err})
						s.mu.Unlock()
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

// waitRefused waits until n connections have ended refused, then checks
// that no refused connection gave the server a byte.
func (s *echoServer) waitRefused(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.mu.Lock()
		var refused []ended
		for _, e := range s.ended {
			if errors.Is(e.err, ErrRefused) {
				refused = append(refused, e)
			}
		}
		s.mu.Unlock()
		if len(refused) >= n {
			for _, e := range refused {
				if e.bytes != 0 {
					t.Errorf("the server was given %d bytes of a refused connection", e.bytes)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections refused after 20s", len(refused), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func roundTrip(c net.Conn) error {
	msg := []byte("PSDP hello")
	if _, err := c.Write(msg); err != nil {
		return err
	}
	back := make([]byte, len(msg))
	if _, err := io.ReadFull(c, back); err != nil {
		return err
	}
	if string(back) != string(msg) {
		return fmt.Errorf("echo %q, want %q", back, msg)
	}
	return nil
}

func TestMutualTLS(t *testing.T) {
	dir := makeDir(t)
	ps := load(t, Files{Dir: dir}, "ps", 0)
	s := serveEcho(t, ps)
	w := load(t, Files{Dir: dir}, "worker", 1)
	c, err := w.Dialer(nil)(context.Background(), s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c); err != nil {
		t.Fatal(err)
	}
	st := c.(interface{ ConnectionState() tls.ConnectionState }).ConnectionState()
	// AES-128-GCM is the fastest suite where the CPU has AES instructions
	// (ChaCha20 is chosen only where it has none).
	if st.Version != tls.VersionTLS13 || (st.CipherSuite != tls.TLS_AES_128_GCM_SHA256 && st.CipherSuite != tls.TLS_CHACHA20_POLY1305_SHA256) {
		t.Errorf("negotiated %s with %s, want TLS 1.3 with AES-128-GCM", tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite))
	}
	if len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Subject.CommonName != "ps-0" {
		t.Errorf("peer certificate %v, want ps-0's", st.PeerCertificates)
	}
}

func TestTLSRefusals(t *testing.T) {
	dir, other := makeDir(t), makeDir(t)
	ps := load(t, Files{Dir: dir}, "ps", 0)
	s := serveEcho(t, ps)
	ctx := context.Background()

	// No TLS at all: a data-path preface, as an old client sends it.
	raw, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	raw.Write([]byte("PSDP\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	raw.SetReadDeadline(time.Now().Add(20 * time.Second))
	if b, err := io.ReadAll(raw); len(b) != 0 && err == nil {
		// A TLS alert may come back; an echo must not.
		if strings.Contains(string(b), "PSDP") {
			t.Errorf("a plain connection was echoed: %q", b)
		}
	}
	raw.Close()

	// Another CA's worker: the worker refuses the ps (unknown authority).
	_, err = load(t, Files{Dir: other}, "worker", 1).Dialer(nil)(ctx, s.addr)
	var he *HandshakeError
	if !errors.As(err, &he) || !strings.HasPrefix(err.Error(), "TLS: the ps's certificate is not from this task's CA") {
		t.Errorf("dial with another CA: %v, want a TLS HandshakeError naming the CA", err)
	}

	// A client that trusts the ps but presents another CA's certificate,
	// and one with no certificate: the ps refuses both.
	pair, err := tls.LoadX509KeyPair(filepath.Join(other, "worker-1.crt"), filepath.Join(other, "worker-1.key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, certs := range [][]tls.Certificate{{pair}, nil} {
		cfg := ps.client.Clone()
		cfg.Certificates = certs
		cfg.ServerName = "127.0.0.1"
		c, err := tls.Dial("tcp", s.addr, cfg)
		if err == nil {
			// TLS 1.3: the client finishes first; the ps's refusal comes
			// on the first read.
			err = roundTrip(c)
			c.Close()
		}
		if err == nil {
			t.Errorf("a client with certificates %d was served", len(certs))
		}
	}
	s.waitRefused(t, 4)
	// Once per peer: the first refusal is logged with its reason, the rest
	// are counted.
	log := s.log.all()
	if n := strings.Count(log, "refused a connection from 127.0.0.1:"); n != 1 {
		t.Errorf("logged %d refusals, want 1 (once per peer):\n%s", n, log)
	}
	if !strings.Contains(log, "TLS:") {
		t.Errorf("the refusal does not say why:\n%s", log)
	}
}

func TestWrongHostRefusedByClient(t *testing.T) {
	dir := t.TempDir()
	if _, err := MakeCerts(CertsConfig{PS: []string{"ps0.example:2222"}, Workers: []string{"127.0.0.1"}, Out: dir, Valid: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// The ps's certificate names ps0.example; Load refuses it for a ps at
	// 127.0.0.1 ...
	if _, err := Load(Files{Dir: dir}, "ps", 0, "127.0.0.1"); err == nil || !strings.Contains(err.Error(), "does not name this ps's host") {
		t.Fatalf("Load: %v, want an error naming the host", err)
	}
	// ... and a worker that reaches it at 127.0.0.1 refuses it.
	ps, err := Load(Files{Dir: dir}, "ps", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	s := serveEcho(t, ps)
	_, err = load(t, Files{Dir: dir}, "worker", 0).Dialer(nil)(context.Background(), s.addr)
	if err == nil || !strings.HasPrefix(err.Error(), "TLS: the ps's certificate is for other hosts") {
		t.Fatalf("dial: %v, want a refusal naming the hosts", err)
	}
}

func writeToken(t *testing.T, tok string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestToken(t *testing.T) {
	good := writeToken(t, "0123456789abcdef-the-shared-one")
	bad := writeToken(t, "0123456789abcdef-another-token")
	ps := load(t, Files{TokenFile: good}, "ps", 0)
	s := serveEcho(t, ps)
	ctx := context.Background()

	c, err := load(t, Files{TokenFile: good}, "worker", 0).Dialer(nil)(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c); err != nil {
		t.Fatal(err)
	}
	c.Close()

	_, err = load(t, Files{TokenFile: bad}, "worker", 0).Dialer(nil)(ctx, s.addr)
	if !errors.Is(err, errRefused) || !strings.HasPrefix(err.Error(), "token: the ps refused this task's proof") {
		t.Errorf("wrong token: %v, want the ps's refusal", err)
	}
	// A client that knows nothing of tokens sends a request at once.
	raw, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	raw.Write(make([]byte, 64))
	raw.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, _ := io.ReadAll(raw)
	if len(b) != len(tokenMagic)+challengeLen {
		t.Errorf("a client without the token read %d bytes, want only the %d-byte challenge", len(b), len(tokenMagic)+challengeLen)
	}
	raw.Close()
	s.waitRefused(t, 2)
	if log := s.log.all(); strings.Count(log, "refused a connection from 127.0.0.1:") != 1 || !strings.Contains(log, "token: "+errBadProof.Error()) {
		t.Errorf("log, want one refusal saying the proof does not match:\n%s", log)
	}

	// A client with a token against a ps without one: told what is
	// missing, within the handshake timeout.
	plain := serveEcho(t, &Policy{})
	w := load(t, Files{TokenFile: good}, "worker", 0)
	w.HandshakeTimeout = 200 * time.Millisecond
	if _, err := w.Dialer(nil)(ctx, plain.addr); !errors.Is(err, errNoChallenge) {
		t.Errorf("token against a plain ps: %v, want %v", err, errNoChallenge)
	}
}

func TestSilentConnectionNotLogged(t *testing.T) {
	s := serveEcho(t, load(t, Files{TokenFile: writeToken(t, "0123456789abcdef")}, "ps", 0))
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	s.waitRefused(t, 1)
	if log := s.log.all(); log != "" {
		t.Errorf("a connection that sent nothing was logged: %s", log)
	}
}

func TestLoadErrors(t *testing.T) {
	dir, other := makeDir(t), makeDir(t)
	short := writeToken(t, "short")
	for _, tc := range []struct {
		f    Files
		want string
	}{
		{Files{TokenFile: short}, "want at least 16"},
		{Files{TokenFile: filepath.Join(dir, "none")}, "no such file"},
		{Files{Cert: filepath.Join(dir, "worker-0.crt")}, "go together"},
		{Files{Dir: t.TempDir()}, "no such file"},
		{Files{Dir: dir, CA: filepath.Join(other, CAFile)}, "not accepted by the CA"},
		{Files{Dir: dir, CA: filepath.Join(dir, "worker-0.key")}, "no PEM certificate"},
	} {
		if _, err := Load(tc.f, "worker", 0, "127.0.0.1"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%+v): %v, want an error with %q", tc.f, err, tc.want)
		}
	}
	if p, err := Load(Files{}, "ps", 0, "10.0.0.1"); p != nil || err != nil {
		t.Errorf("Load of nothing: %v, %v", p, err)
	}
}

func TestMakeCertsKeepsCA(t *testing.T) {
	dir := makeDir(t)
	before, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
	cfg := CertsConfig{PS: []string{"a:1"}, Workers: []string{"b:1"}, Out: dir, Valid: time.Hour}
	if _, err := MakeCerts(cfg); !errors.Is(err, ErrCAExists) {
		t.Fatalf("second MakeCerts: %v, want ErrCAExists", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, CAKeyFile)); string(after) != string(before) {
		t.Fatal("the CA key changed")
	}
	cfg.Force = true
	if _, err := MakeCerts(cfg); err != nil {
		t.Fatal(err)
	}
	secret, err := os.ReadFile(filepath.Join(dir, SecretFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: Secret", "  ca.crt: ", "  ps-0.key: ", "  worker-0.crt: "} {
		if !strings.Contains(string(secret), want) {
			t.Errorf("secret.yaml lacks %q", want)
		}
	}
	if strings.Contains(string(secret), "ca.key") {
		t.Error("secret.yaml holds the CA key")
	}
	if fi, err := os.Stat(filepath.Join(dir, "ps-0.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ps-0.key: %v, mode %v, want 0600", err, fi.Mode())
	}
}

func TestRefusalsRateLimited(t *testing.T) {
	var log logBuf
	r := newRefusals(log.logf)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	a := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 4000}
	b := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 6), Port: 4000}
	r.refuse(a, "TLS: x")
	for range 5 {
		now = now.Add(time.Second)
		r.refuse(a, "TLS: y")
	}
	r.refuse(b, "token: z")
	if len(log.lines) != 2 {
		t.Fatalf("lines %q, want the first refusal of each peer", log.lines)
	}
	now = now.Add(time.Minute)
	r.refuse(a, "TLS: w")
	if len(log.lines) != 3 || !strings.Contains(log.lines[2], "refused 6 connections from 10.0.0.5") {
		t.Fatalf("lines %q, want a count after a minute", log.lines)
	}
	// Many peers: memory stays bounded.
	for i := range 3 * maxPeers {
		r.refuse(&net.TCPAddr{IP: net.IPv4(11, byte(i>>16), byte(i>>8), byte(i)), Port: 1}, "x")
	}
	if len(r.peers) > maxPeers+1 {
		t.Errorf("%d peers remembered, want at most %d", len(r.peers), maxPeers+1)
	}
}

// BenchmarkHandshake is what authentication adds to opening a connection:
// a dial on loopback, the handshakes, and one small round trip.
func BenchmarkHandshake(b *testing.B) {
	dir := b.TempDir()
	if _, err := MakeCerts(CertsConfig{PS: []string{"127.0.0.1"}, Workers: []string{"127.0.0.1"}, Out: dir, Valid: time.Hour}); err != nil {
		b.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, m := range []struct {
		name string
		f    Files
	}{{"none", Files{}}, {"tls", Files{Dir: dir}}, {"token", Files{TokenFile: tok}}, {"tls+token", Files{Dir: dir, TokenFile: tok}}} {
		b.Run(m.name, func(b *testing.B) {
			ps, err := Load(m.f, "ps", 0, "127.0.0.1")
			if err != nil {
				b.Fatal(err)
			}
			w, err := Load(m.f, "worker", 0, "")
			if err != nil {
				b.Fatal(err)
			}
			s := serveEcho(b, ps)
			dial := w.Dialer(nil)
			if dial == nil {
				var d net.Dialer
				dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
			}
			for b.Loop() {
				c, err := dial(context.Background(), s.addr)
				if err != nil {
					b.Fatal(err)
				}
				if err := roundTrip(c); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

type recordWriter struct{ writes [][]byte }

func (r *recordWriter) Write(b []byte) (int, error) {
	r.writes = append(r.writes, append([]byte(nil), b...))
	return len(b), nil
}

func TestGatherer(t *testing.T) {
	big := func(n int) []byte { return bytes.Repeat([]byte{'x'}, n) }
	for _, tc := range []struct {
		bufs   net.Buffers
		writes int
	}{
		{net.Buffers{[]byte("header"), []byte("name"), big(100)}, 1},              // a small frame: one write
		{net.Buffers{[]byte("h"), big(100 << 10), []byte("n"), big(50 << 10)}, 4}, // small ones gathered, large ones as they are
		{net.Buffers{big(3000), big(3000), big(70 << 10)}, 2},
	} {
		var g gatherer
		var w recordWriter
		n, err := g.writeBuffers(&w, tc.bufs)
		want := bytes.Join(tc.bufs, nil)
		if err != nil || n != int64(len(want)) || !bytes.Equal(bytes.Join(w.writes, nil), want) {
			t.Errorf("wrote %d bytes (%v), not the buffers in order", n, err)
		}
		if len(w.writes) != tc.writes {
			t.Errorf("%d writes of %d buffers, want %d", len(w.writes), len(tc.bufs), tc.writes)
		}
	}
}
