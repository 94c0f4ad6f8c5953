package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/secure"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Rate is `paramserv rate`: change a running job's learning rate (and
// schedule) on every ps from one global step on, as the chief's
// ChangeRate does.
func Rate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv rate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	psHosts := fs.String("ps_hosts", "", "the ps, HOST:PORT comma-separated (default: TF_CONFIG's cluster.ps)")
	lr := fs.Float64("learning_rate", math.NaN(), "the new learning rate, > 0 (required: no default)")
	schedule := fs.String("lr_schedule", "", "the new schedule on the global step, as train's --lr_schedule (default: constant)")
	atStep := fs.Int64("at_step", -1, "the first global step at the new rate (default: one past the furthest ps's step)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for each ps")
	var auth secure.Files
	fs.StringVar(&auth.Dir, "tls_dir", "", "mutual TLS: the directory paramserv certs made for the job; rate presents worker-0's (the chief's) certificate and trusts ca.crt")
	fs.StringVar(&auth.TokenFile, "auth_token_file", "", "the job's shared secret, when its ps want one")
	help := func(w io.Writer) {
		fmt.Fprint(w, `Usage: paramserv rate --learning_rate=X [--lr_schedule=SCHEDULE] [--at_step=N] [--ps_hosts=HOST:PORT,...]

Changes a running job's learning rate, and its schedule on the global step,
on every ps from global step --at_step on, as the chief's ChangeRate
(Go Worker.ChangeRate, Python change_rate()) does: every ps switches at the
same step, logs the change and keeps it in its checkpoints. Variables and
tables with their own rule keep theirs. Without --at_step the change takes
effect one step past the furthest ps's global step; a ps already past the
step named switches at its next update. The same command with the same
--at_step again replaces the change (run it again if a ps did not answer).
The ps come from --ps_hosts or the TF_CONFIG environment variable. A job
whose tasks authenticate (--tls_dir, --auth_token_file) is asked with the
same files, as the chief. Exit status 1 if a ps did not take the change,
2 for a bad flag.
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
		fmt.Fprintf(stderr, "paramserv rate: "+format+"\n", a...)
		return 2
	}
	var hosts []string
	var err error
	switch {
	case *psHosts != "":
		if hosts, err = cluster.ParseHosts(*psHosts); err != nil {
			return fail("--ps_hosts: %v", err)
		}
	case os.Getenv("TF_CONFIG") != "":
		tc, err := cluster.ParseTFConfig(os.Getenv("TF_CONFIG"))
		if err != nil {
			return fail("TF_CONFIG: %v", err)
		}
		hosts = tc.PS
	}
	switch {
	case len(hosts) == 0:
		return fail("no ps: give --ps_hosts or TF_CONFIG with cluster.ps")
	case !isSet(fs, "learning_rate"):
		return fail("want --learning_rate, the new rate")
	case *atStep < -1 || (*atStep == -1 && isSet(fs, "at_step")):
		return fail("--at_step=%d: want a global step >= 0", *atStep)
	case *timeout <= 0:
		return fail("--timeout=%v: want a duration > 0", *timeout)
	}
	// The rule's name matters not: the ps check the rate and the schedule
	// as every rule takes them.
	if _, err := optim.NewScheduled(optim.Config{Name: "sgd", LearningRate: *lr, Schedule: *schedule}, nil); err != nil {
		if ce, ok := err.(*optim.ConfigError); ok && ce.Field == "learning_rate" {
			return fail("--learning_rate=%v: want %s", *lr, ce.Want)
		}
		return fail("--lr_schedule: %v", err)
	}
	policy, err := secure.Load(auth, "worker", 0, "")
	if err != nil {
		return fail("%v", err)
	}
	conns := make([]pb.ParamServerClient, len(hosts))
	for i, h := range hosts {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if policy != nil {
			opts = append(opts, grpc.WithContextDialer(policy.Dialer(nil)))
		}
		conn, err := grpc.NewClient(h, opts...)
		if err != nil {
			return fail("ps %d at %s: %v", i, h, err)
		}
		defer conn.Close()
		conns[i] = pb.NewParamServerClient(conn)
	}
	// each asks every ps at once, so that the command ends within one
	// --timeout however many do not answer.
	each := func(call func(ctx context.Context, i int) error) []error {
		errs := make([]error, len(hosts))
		var wg sync.WaitGroup
		for i := range hosts {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, *timeout)
				defer cancel()
				errs[i] = call(cctx, i)
			})
		}
		wg.Wait()
		return errs
	}
	from := *atStep
	if from < 0 {
		steps := make([]int64, len(hosts))
		errs := each(func(ctx context.Context, i int) error {
			st, err := conns[i].Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(true))
			if err == nil && !st.Initialized {
				err = fmt.Errorf("not initialised yet: its job has not started (a rate change needs the job's rule)")
			}
			if err == nil {
				steps[i] = st.GlobalStep
			}
			return err
		})
		for i, err := range errs {
			if err != nil {
				fmt.Fprintf(stderr, "paramserv rate: ps %d at %s: %s; nothing changed\n", i, hosts[i], statusWhy(hosts[i], *timeout, err))
				return 1
			}
			from = max(from, steps[i]+1)
		}
	}
	sched := *schedule
	if sched == "" {
		sched = "constant"
	}
	req := &pb.ChangeRateRequest{Worker: 0, FromStep: from, LearningRate: *lr, Schedule: *schedule}
	at := make([]int64, len(hosts))
	errs := each(func(ctx context.Context, i int) error {
		resp, err := conns[i].ChangeRate(ctx, req, grpc.WaitForReady(true))
		if err == nil {
			at[i] = resp.GlobalStep
		}
		return err
	})
	code := 0
	for i, err := range errs {
		if err != nil {
			fmt.Fprintf(stdout, "ps %d at %s: did not take the change: %s\n", i, hosts[i], statusWhy(hosts[i], *timeout, err))
			code = 1
			continue
		}
		late := ""
		if at[i] > from {
			late = fmt.Sprintf(" (it was at step %d: it switches at its next update)", at[i])
		}
		fmt.Fprintf(stdout, "ps %d at %s: learning rate %v, schedule %s, from global step %d%s\n", i, hosts[i], *lr, sched, from, late)
	}
	if code != 0 {
		fmt.Fprintf(stdout, "not every ps took the change: run this command again with --at_step=%d once they answer, so that all switch at the same step\n", from)
	}
	return code
}

// isSet says whether the flag name was given on fs's command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
