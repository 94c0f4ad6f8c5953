package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/secure"
	"github.com/paramserv/paramserv/internal/telemetry"
	"github.com/paramserv/paramserv/internal/vfs"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Status is `paramserv status`: ask every ps of a cluster how it is.
func Status(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	psHosts := fs.String("ps_hosts", "", "the ps, HOST:PORT comma-separated (default: TF_CONFIG's cluster.ps)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for each ps")
	var auth secure.Files
	fs.StringVar(&auth.Dir, "tls_dir", "", "mutual TLS: the directory paramserv certs made for the job; status presents worker-0's certificate (worker-0.crt, .key) and trusts ca.crt")
	fs.StringVar(&auth.TokenFile, "auth_token_file", "", "the job's shared secret, when its ps want one")
	help := func(w io.Writer) {
		fmt.Fprint(w, `Usage: paramserv status [--ps_hosts=HOST:PORT,...]

Prints each ps's state: global step, mode, pushes applied, dropped and
rejected, its variables and tables with their sizes, every worker with
the time since the ps last heard from it, and the checkpoints of its
--checkpoint_dir when that directory is readable here. The ps come from
--ps_hosts or the TF_CONFIG environment variable, all asked at once. A job whose tasks
authenticate (--tls_dir, --auth_token_file) is asked with the same files.
Exit status 1 if a ps does not answer.
`)
		printFlags(w, fs, false, nil)
	}
	if code, done := parseArgs(fs, args, stdout, stderr, help); done {
		return code
	}
	if code, bad := extraArg(fs, stderr); bad {
		return code
	}
	var hosts []string
	var err error
	switch {
	case *psHosts != "":
		hosts, err = cluster.ParseHosts(*psHosts)
		if err != nil {
			err = fmt.Errorf("--ps_hosts: %w", err)
		}
	case os.Getenv("TF_CONFIG") != "":
		var tc cluster.TFConfig
		tc, err = cluster.ParseTFConfig(os.Getenv("TF_CONFIG"))
		hosts = tc.PS
	}
	if err == nil && len(hosts) == 0 {
		err = fmt.Errorf("no ps: give --ps_hosts or TF_CONFIG with cluster.ps")
	}
	if err == nil && *timeout <= 0 {
		err = fmt.Errorf("--timeout=%v: want a duration > 0", *timeout)
	}
	var policy *secure.Policy
	if err == nil {
		policy, err = secure.Load(auth, "worker", 0, "")
	}
	if err != nil {
		fmt.Fprintf(stderr, "paramserv status: %v\n", err)
		return 2
	}
	code := 0
	var dirs []string
	// Every ps is asked at once, so that the command ends within one
	// --timeout however many do not answer; the answers print in order.
	type answer struct {
		st  *pb.StatusResponse
		err error
	}
	answers := make([]answer, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() {
			st, err := psStatus(ctx, h, *timeout, policy)
			answers[i] = answer{st, err}
		})
	}
	wg.Wait()
	for i, h := range hosts {
		st, err := answers[i].st, answers[i].err
		if err != nil {
			fmt.Fprintf(stdout, "ps %d at %s: no answer: %s\n", i, h, statusWhy(h, *timeout, err))
			code = 1
			continue
		}
		fmt.Fprint(stdout, telemetry.FormatStatus(i, h, st))
		if d := st.CheckpointDir; d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		l, err := checkpoint.Verifier{Finite: true}.List(vfs.OS, d)
		if err != nil {
			fmt.Fprintf(stdout, "checkpoints in %s: not readable here (%v)\n", d, err)
			continue
		}
		fmt.Fprintf(stdout, "checkpoints in %s:\n", d)
		for _, line := range strings.Split(strings.TrimRight(l.String(), "\n"), "\n") {
			fmt.Fprintf(stdout, "  %s\n", line)
		}
	}
	return code
}

// psStatus asks one ps for its status with details.
// A policy (--tls_dir, --auth_token_file) wraps each connection as a
// worker's is.
func psStatus(ctx context.Context, host string, timeout time.Duration, policy *secure.Policy) (*pb.StatusResponse, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if policy != nil {
		opts = append(opts, grpc.WithContextDialer(policy.Dialer(nil)))
	}
	conn, err := grpc.NewClient(client.GRPCTarget(host, policy != nil), opts...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return pb.NewParamServerClient(conn).Status(ctx, &pb.StatusRequest{Details: true}, grpc.WaitForReady(true))
}

// statusWhy says in a user's words why a ps did not answer a Status
// request, from gRPC's error: nothing listening, a name that does not
// resolve, a server that is not a paramserv ps (or speaks TLS), no answer
// in time. gRPC's own text follows in brackets.
func statusWhy(host string, timeout time.Duration, err error) string {
	st := grpcstatus.Convert(err)
	msg := st.Message()
	var why string
	switch {
	case strings.Contains(msg, "connection refused"):
		why = "nothing listens there (connection refused)"
	case strings.Contains(msg, "produced zero addresses") || strings.Contains(msg, "no such host"):
		h, _, serr := net.SplitHostPort(host)
		if serr != nil {
			h = host
		}
		why = fmt.Sprintf("cannot resolve %s", h)
	case strings.Contains(msg, "server preface") || strings.Contains(msg, "http2") || strings.Contains(msg, "tls"):
		why = "something listens there but does not speak gRPC as a paramserv ps does (another service, or a ps that wants --tls_dir or --auth_token_file)"
	case strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF"):
		why = "something listens there but closes the connection without speaking gRPC (another service?)"
	case st.Code() == codes.Unimplemented:
		why = "the server there is not a paramserv ps (it has no Status method)"
	case st.Code() == codes.Unauthenticated || st.Code() == codes.PermissionDenied:
		why = "the ps refused the request (give status the job's --tls_dir or --auth_token_file)"
	case st.Code() == codes.DeadlineExceeded:
		why = fmt.Sprintf("nothing came within --timeout=%v (a server that stays silent, or a ps too busy to answer)", timeout)
	default:
		return fmt.Sprintf("%v", err)
	}
	return fmt.Sprintf("%s [%s: %s]", why, st.Code(), msg)
}
