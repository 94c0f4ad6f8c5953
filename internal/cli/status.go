package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/cluster"
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
	help := func(w io.Writer) {
		fmt.Fprint(w, `Usage: paramserv status [--ps_hosts=HOST:PORT,...]

Prints each ps's state: global step, mode, pushes applied, dropped and
rejected, its variables and tables with their sizes, every worker with
the time since the ps last heard from it, and the checkpoints of its
--checkpoint_dir when that directory is readable here. The ps come from
--ps_hosts or the TF_CONFIG environment variable. Exit status 1 if a ps
does not answer.

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
	if err != nil {
		fmt.Fprintf(stderr, "paramserv status: %v\n", err)
		return 2
	}
	code := 0
	var dirs []string
	for i, h := range hosts {
		st, err := psStatus(ctx, h, *timeout)
		if err != nil {
			fmt.Fprintf(stdout, "ps %d at %s: no answer: %v\n", i, h, err)
			code = 1
			continue
		}
		fmt.Fprint(stdout, telemetry.FormatStatus(i, h, st))
		if d := st.CheckpointDir; d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		l, err := checkpoint.List(vfs.OS, d)
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
func psStatus(ctx context.Context, host string, timeout time.Duration) (*pb.StatusResponse, error) {
	conn, err := grpc.NewClient(host, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return pb.NewParamServerClient(conn).Status(ctx, &pb.StatusRequest{Details: true}, grpc.WaitForReady(true))
}
