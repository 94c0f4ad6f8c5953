package main

// Mutual TLS and tokens (issue 16), as an outsider would try them: real
// processes on loopback, an attacker with a raw socket and with gRPC.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paramserv/paramserv/internal/secure"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

type dialFunc = func(ctx context.Context, addr string) (net.Conn, error)

// rawPush opens a data-path connection with dial (nil: plain TCP) and sends
// a hand-made push as worker 1 at step 0; nil means the ps acknowledged it.
func rawPush(addr string, dial dialFunc) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(wire.Preface()); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	var hello [wire.HelloLen]byte
	if _, err := io.ReadFull(br, hello[:]); err != nil {
		return fmt.Errorf("no hello: %w", err)
	}
	if _, err := wire.ParseHello(hello[:]); err != nil {
		return fmt.Errorf("hello %q: %w", hello, err)
	}
	var f wire.Frame
	f.Reset(wire.ReqHeaderLen)
	f.Dense("weight", []float32{-10000})
	f.Dense("bias", []float32{-10000})
	bufs := f.Request(wire.ReqHeader{Op: wire.OpPush, Worker: 1, Step: 0})
	if _, err := bufs.WriteTo(c); err != nil {
		return err
	}
	var rep [wire.RepHeaderLen]byte
	if _, err := io.ReadFull(br, rep[:]); err != nil {
		return fmt.Errorf("no reply: %w", err)
	}
	h, err := wire.ParseRepHeader(rep[:])
	if err != nil {
		return err
	}
	if h.Err {
		body := make([]byte, h.Body)
		_, _ = io.ReadFull(br, body)
		return fmt.Errorf("error reply %q", body)
	}
	return nil
}

// grpcCalls tries every call an outsider could use to read or damage the
// job (only those named, if any); each entry is the call's error (nil: it
// worked).
func grpcCalls(addr string, dial dialFunc, only ...string) map[string]error {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	target := addr
	if dial != nil {
		target = "passthrough:///" + addr
		opts = append(opts, grpc.WithContextDialer(dial))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return map[string]error{"dial": err}
	}
	defer conn.Close()
	c := pb.NewParamServerClient(conn)
	grad := []*pb.DenseTensor{{Name: "weight", Data: wire.Float32Bytes([]float32{-10000})}, {Name: "bias", Data: wire.Float32Bytes([]float32{-10000})}}
	calls := map[string]func(ctx context.Context) error{
		"Status": func(ctx context.Context) error { _, err := c.Status(ctx, &pb.StatusRequest{}); return err },
		"Pull":   func(ctx context.Context) error { _, err := c.Pull(ctx, &pb.PullRequest{Worker: 1}); return err },
		"Push": func(ctx context.Context) error {
			_, err := c.Push(ctx, &pb.PushRequest{Worker: 1, Grads: grad})
			return err
		},
		"PushPull": func(ctx context.Context) error {
			_, err := c.PushPull(ctx, &pb.PushPullRequest{Push: &pb.PushRequest{Worker: 1, Grads: grad}, Pull: &pb.PullRequest{Worker: 1}})
			return err
		},
		"Init": func(ctx context.Context) error {
			_, err := c.Init(ctx, &pb.InitRequest{Worker: 0, Vars: []*pb.VarSpec{{Name: "weight", Shape: []int64{1}}}, NumWorkers: 2})
			return err
		},
		"Checkpoint": func(ctx context.Context) error {
			_, err := c.Checkpoint(ctx, &pb.CheckpointRequest{Dir: os.TempDir(), Step: 1, NumShards: 1})
			return err
		},
		"Restore": func(ctx context.Context) error {
			_, err := c.Restore(ctx, &pb.RestoreRequest{Dir: os.TempDir(), Step: 1})
			return err
		},
		"Done": func(ctx context.Context) error {
			if _, err := c.Done(ctx, &pb.DoneRequest{Worker: 0}); err != nil {
				return err
			}
			_, err := c.Done(ctx, &pb.DoneRequest{Worker: 1})
			return err
		},
	}
	errs := map[string]error{}
	for name, call := range calls {
		if len(only) > 0 && !slices.Contains(only, name) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs[name] = call(ctx)
		cancel()
	}
	return errs
}

// tlsDialer is a client of its own making: it trusts ca and presents certs.
func tlsDialer(t *testing.T, ca string, certs []tls.Certificate) dialFunc {
	t.Helper()
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		raw, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		c := tls.Client(raw, &tls.Config{RootCAs: pool, Certificates: certs, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
		if err := c.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return c, nil
	}
}

// forgedProof speaks the token handshake without the token: it answers the
// challenge with a made-up proof and, whatever the ps proves back, goes on.
func forgedProof(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	challenge := make([]byte, 4+32)
	proofBack := make([]byte, 32)
	if _, err = io.ReadFull(c, challenge); err == nil {
		if _, err = c.Write(make([]byte, 64)); err == nil {
			_, err = io.ReadFull(c, proofBack)
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

func policyDialer(t *testing.T, f secure.Files, job string, i int) dialFunc {
	t.Helper()
	p, err := secure.Load(f, job, i, "")
	if err != nil {
		t.Fatal(err)
	}
	return p.Dialer(nil)
}

func makeCerts(t *testing.T, ps, workers []string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tls")
	p := start(t, "certs", nil, "certs", "--ps_hosts="+strings.Join(ps, ","), "--worker_hosts="+strings.Join(workers, ","), "--out="+dir)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("paramserv certs exited %d", code)
	}
	return dir
}

func writeTokenFile(t *testing.T, tok string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The attacks against a ps without authentication succeed (the
// hole the flags close); against a ps with mTLS or a token every one is
// refused before a frame is parsed, logged once with the peer's address,
// nothing is applied, and the job trains on to its end.
func TestOutsiderRefused(t *testing.T) {
	t.Run("no authentication: the attacks work", func(t *testing.T) {
		hosts := freeHosts(t, 3)
		ps, workers := hosts[:1], hosts[1:]
		p0 := start(t, "ps0", nil, clusterArgs(ps, workers, "ps", 0)...)
		w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), "--sync_replicas", "--train_steps=300")...)
		w0.waitFor(t, "chief initialised", 30*time.Second)
		if err := rawPush(ps[0], nil); err != nil {
			t.Errorf("raw push to an open ps: %v, want it acknowledged", err)
		}
		if err := grpcCalls(ps[0], nil, "Pull")["Pull"]; err != nil {
			t.Errorf("gRPC Pull from an open ps: %v, want the values", err)
		}
		if strings.Contains(p0.output(), "WARNING") {
			t.Errorf("a ps on loopback warned:\n%s", p0.output())
		}
	})

	// Certificates name hosts, not ports: these fit every cluster on
	// 127.0.0.1 of one ps and two workers.
	lo := []string{"127.0.0.1"}
	certs, otherCerts := makeCerts(t, lo, append(lo, lo...)), makeCerts(t, lo, append(lo, lo...))
	token := writeTokenFile(t, "the-shared-secret-of-this-job-0123")
	foreign, err := tls.LoadX509KeyPair(filepath.Join(otherCerts, "worker-1.crt"), filepath.Join(otherCerts, "worker-1.key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []struct {
		name     string
		flag     string
		files    secure.Files
		outsider map[string]dialFunc
	}{
		{"mTLS", "--tls_dir=" + certs, secure.Files{Dir: certs}, map[string]dialFunc{
			"plain TCP":                        nil,
			"a client of another CA":           policyDialer(t, secure.Files{Dir: otherCerts}, "worker", 1),
			"another CA's certificate":         tlsDialer(t, filepath.Join(certs, secure.CAFile), []tls.Certificate{foreign}),
			"TLS without a client certificate": tlsDialer(t, filepath.Join(certs, secure.CAFile), nil),
		}},
		{"token", "--auth_token_file=" + token, secure.Files{TokenFile: token}, map[string]dialFunc{
			"plain TCP":      nil,
			"a forged proof": forgedProof,
			"another token":  policyDialer(t, secure.Files{TokenFile: writeTokenFile(t, "not-the-shared-secret-0123456")}, "worker", 1),
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			hosts := freeHosts(t, 3)
			ps, workers := hosts[:1], hosts[1:]
			res := filepath.Join(t.TempDir(), "result.json")
			p0 := start(t, "ps0", nil, append(clusterArgs(ps, workers, "ps", 0), mode.flag)...)
			// Synchronous with worker 1 not started: the chief waits at
			// step 0 while the outsider tries.
			w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), mode.flag, "--sync_replicas", "--train_steps=300", "--result_file="+res)...)
			w0.waitFor(t, "chief initialised", 30*time.Second)
			for who, dial := range mode.outsider {
				if err := rawPush(ps[0], dial); err == nil {
					t.Errorf("%s: a raw data-path push was acknowledged", who)
				}
				for call, err := range grpcCalls(ps[0], dial) {
					if err == nil {
						t.Errorf("%s: gRPC %s worked", who, call)
					}
				}
			}
			// Nothing was applied, nothing ended: the ps, asked by a
			// task of the job, is where the chief left it.
			st, err := pb.NewParamServerClient(dialGRPC(t, ps[0], policyDialer(t, mode.files, "worker", 1))).Status(context.Background(), &pb.StatusRequest{})
			if err != nil {
				t.Fatalf("Status as a task of the job: %v", err)
			}
			// (The chief's own push of step 0 may be in.)
			if st.GlobalStep != 0 || st.AppliedPushes > 1 || st.RejectedPushes != 0 || st.WorkersDone != 0 {
				t.Errorf("after the outsider: %+v, want step 0, at most the chief's push applied, nothing rejected or done", st)
			}
			w1 := start(t, "worker1", nil, append(clusterArgs(ps, workers, "worker", 1), mode.flag, "--sync_replicas", "--train_steps=300")...)
			for _, p := range []*proc{w0, w1, p0} {
				if code := p.wait(t, 2*time.Minute); code != 0 {
					t.Fatalf("%s exited %d", p.name, code)
				}
			}
			if r := readResult(t, res); r.GlobalStep != 300 || r.RejectedPushes != 0 {
				t.Errorf("result %+v, want global step 300, no rejected push", r)
			}
			out := p0.output()
			if n := strings.Count(out, "refused a connection from 127.0.0.1:"); n != 1 {
				t.Errorf("the ps logged %d first refusals of 127.0.0.1, want 1 (once per peer)", n)
			}
		})
	}
}

func dialGRPC(t *testing.T, addr string, dial dialFunc) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// A job with mTLS, and one with a token, ends exactly where the same job
// without them does (synchronous, so the result is deterministic).
func TestAuthenticatedJobTrainsTheSame(t *testing.T) {
	certs := makeCerts(t, []string{"127.0.0.1", "127.0.0.1"}, []string{"127.0.0.1", "127.0.0.1"})
	token := writeTokenFile(t, "the-shared-secret-of-this-job-0123")
	var want result
	for i, extra := range [][]string{nil, {"--tls_dir=" + certs}, {"--auth_token_file=" + token}, {"--tls_dir=" + certs, "--auth_token_file=" + token}} {
		res := filepath.Join(t.TempDir(), "result.json")
		p := start(t, "local", nil, append([]string{"local", "--ps=2", "--workers=2", "--sync_replicas", "--train_steps=300", "--result_file=" + res}, extra...)...)
		if code := p.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("%v: exit %d", extra, code)
		}
		if len(extra) > 0 && !strings.Contains(p.output(), "connections require") {
			t.Errorf("%v: the tasks do not say what they require", extra)
		}
		r := readResult(t, res)
		if i == 0 {
			want = r
			checkLinreg(t, r)
			continue
		}
		if r.Weight != want.Weight || r.Bias != want.Bias || r.GlobalStep != want.GlobalStep {
			t.Errorf("%v: weight %v bias %v step %d, want %v %v %d as without", extra, r.Weight, r.Bias, r.GlobalStep, want.Weight, want.Bias, want.GlobalStep)
		}
	}
}

// A ps that listens beyond loopback with no authentication says so.
func TestOpenPSWarns(t *testing.T) {
	// 127.0.0.1 only is loopback; the unspecified address is not, and
	// binds without needing an interface of its own.
	hosts := freeHosts(t, 2)
	ps := []string{"0.0.0.0" + strings.TrimPrefix(hosts[0], "127.0.0.1")}
	p := start(t, "ps0", nil, append(clusterArgs(ps, hosts[1:], "ps", 0), "--startup_timeout=1s")...)
	p.waitFor(t, "WARNING: this ps listens on "+ps[0]+", not a loopback address, with no authentication", 30*time.Second)
	p.cmd.Process.Kill()
}

func TestCertsCommand(t *testing.T) {
	dir := t.TempDir()
	tf, _ := json.Marshal(map[string]any{"cluster": map[string]any{"ps": []string{"job-ps-0.job:2222"}, "worker": []string{"job-worker-0.job:2222", "10.1.2.3:2222"}}})
	p := start(t, "certs", []string{"TF_CONFIG=" + string(tf)}, "certs", "--out="+dir)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, f := range []string{"ca.crt", "ca.key", "ps-0.crt", "ps-0.key", "worker-0.crt", "worker-1.key", "secret.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := secure.Load(secure.Files{Dir: dir}, "ps", 0, "job-ps-0.job"); err != nil {
		t.Errorf("ps 0 with its host: %v", err)
	}
	if _, err := secure.Load(secure.Files{Dir: dir}, "worker", 1, ""); err != nil {
		t.Errorf("worker 1: %v", err)
	}
	again := start(t, "certs", []string{"TF_CONFIG=" + string(tf)}, "certs", "--out="+dir)
	if code := again.wait(t, time.Minute); code != 2 || !strings.Contains(again.output(), "--force") {
		t.Errorf("over an existing CA key: exit %d, want 2 naming --force:\n%s", code, again.output())
	}
}

// bench --auth runs each case against ps with each authentication, and
// every update lands.
func TestBenchAuth(t *testing.T) {
	p := start(t, "bench", nil, "bench", "--cases=tiny", "--op=pushpull", "--reps=5", "--warmup=1", "--baseline=false", "--json", "--auth=none,tls,token,tls+token")
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var got []string
	for _, line := range strings.Split(p.output(), "\n") {
		var r struct {
			Auth     string `json:"auth"`
			Verified bool   `json:"verified"`
		}
		if json.Unmarshal([]byte(line), &r) == nil && r.Auth != "" {
			if !r.Verified {
				t.Errorf("auth %s: not verified", r.Auth)
			}
			got = append(got, r.Auth)
		}
	}
	if want := []string{"none", "tls", "token", "tls+token"}; !slices.Equal(got, want) {
		t.Errorf("results for %v, want %v", got, want)
	}
}
