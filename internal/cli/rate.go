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

// rateUsage is the head of `paramserv rate --help`; the flags follow.
const rateUsage = `Usage: paramserv rate --learning_rate=X [--lr_schedule=SCHEDULE] [--at_step=N] [--ps_hosts=HOST:PORT,...]

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
`

// rateFlags are the flags of `paramserv rate`.
type rateFlags struct {
	psHosts  string
	lr       float64
	schedule string
	atStep   int64
	timeout  time.Duration
	auth     secure.Files
}

func defineRateFlags(fs *flag.FlagSet) *rateFlags {
	r := &rateFlags{}
	fs.StringVar(&r.psHosts, "ps_hosts", "", "the ps, HOST:PORT comma-separated (default: TF_CONFIG's cluster.ps)")
	fs.Float64Var(&r.lr, "learning_rate", math.NaN(), "the new learning rate, > 0 (required: no default)")
	fs.StringVar(&r.schedule, "lr_schedule", "", "the new schedule on the global step, as train's --lr_schedule (default: constant)")
	fs.Int64Var(&r.atStep, "at_step", -1, "the first global step at the new rate (default: one past the furthest ps's step)")
	fs.DurationVar(&r.timeout, "timeout", 10*time.Second, "how long to wait for each ps")
	fs.StringVar(&r.auth.Dir, "tls_dir", "", "mutual TLS: the directory paramserv certs made for the job; rate presents worker-0's (the chief's) certificate and trusts ca.crt")
	fs.StringVar(&r.auth.TokenFile, "auth_token_file", "", "the job's shared secret, when its ps want one")
	return r
}

// Rate is `paramserv rate`: change a running job's learning rate (and
// schedule) on every ps from one global step on, as the chief's
// ChangeRate does.
func Rate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv rate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	r := defineRateFlags(fs)
	help := func(w io.Writer) {
		fmt.Fprint(w, rateUsage)
		printFlags(w, fs, false, nil)
	}
	if code, done := parseArgs(fs, args, stdout, stderr, help); done {
		return code
	}
	if code, bad := extraArg(fs, stderr); bad {
		return code
	}
	hosts, err := r.check(fs)
	if err != nil {
		fmt.Fprintf(stderr, "paramserv rate: %v\n", err)
		return 2
	}
	ps, err := dialRatePS(hosts, r.auth, r.timeout)
	if err != nil {
		fmt.Fprintf(stderr, "paramserv rate: %v\n", err)
		return 2
	}
	defer ps.close()
	from := r.atStep
	if from < 0 {
		var ok bool
		if from, ok = ps.nextStep(ctx, stderr); !ok {
			return 1
		}
	}
	return ps.change(ctx, r.lr, r.schedule, from, stdout)
}

// check checks rate's flags, as given on fs, and says which ps to ask.
func (r *rateFlags) check(fs *flag.FlagSet) (hosts []string, err error) {
	switch {
	case r.psHosts != "":
		if hosts, err = cluster.ParseHosts(r.psHosts); err != nil {
			return nil, fmt.Errorf("--ps_hosts: %v", err)
		}
	case os.Getenv("TF_CONFIG") != "":
		tc, err := cluster.ParseTFConfig(os.Getenv("TF_CONFIG"))
		if err != nil {
			return nil, fmt.Errorf("TF_CONFIG: %v", err)
		}
		hosts = tc.PS
	}
	switch {
	case len(hosts) == 0:
		return nil, fmt.Errorf("no ps: give --ps_hosts or TF_CONFIG with cluster.ps")
	case !isSet(fs, "learning_rate"):
		return nil, fmt.Errorf("want --learning_rate, the new rate")
	case r.atStep < -1 || (r.atStep == -1 && isSet(fs, "at_step")):
		return nil, fmt.Errorf("--at_step=%d: want a global step >= 0", r.atStep)
	case r.timeout <= 0:
		return nil, fmt.Errorf("--timeout=%v: want a duration > 0", r.timeout)
	}
	// The rule's name matters not: the ps check the rate and the schedule
	// as every rule takes them.
	if _, err := optim.NewScheduled(optim.Config{Name: "sgd", LearningRate: r.lr, Schedule: r.schedule}, nil); err != nil {
		if ce, ok := err.(*optim.ConfigError); ok && ce.Field == "learning_rate" {
			return nil, fmt.Errorf("--learning_rate=%v: want %s", r.lr, ce.Want)
		}
		return nil, fmt.Errorf("--lr_schedule: %v", err)
	}
	return hosts, nil
}

// ratePS are the ps a rate change goes to, each asked within timeout.
type ratePS struct {
	hosts   []string
	conns   []pb.ParamServerClient
	cc      []*grpc.ClientConn
	timeout time.Duration
}

// dialRatePS makes a client for each of hosts, presenting the chief's
// credentials from auth where the job has them.
func dialRatePS(hosts []string, auth secure.Files, timeout time.Duration) (*ratePS, error) {
	policy, err := secure.Load(auth, "worker", 0, "")
	if err != nil {
		return nil, err
	}
	p := &ratePS{hosts: hosts, conns: make([]pb.ParamServerClient, len(hosts)), timeout: timeout}
	for i, h := range hosts {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if policy != nil {
			opts = append(opts, grpc.WithContextDialer(policy.Dialer(nil)))
		}
		conn, err := grpc.NewClient(h, opts...)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("ps %d at %s: %v", i, h, err)
		}
		p.cc = append(p.cc, conn)
		p.conns[i] = pb.NewParamServerClient(conn)
	}
	return p, nil
}

func (p *ratePS) close() {
	for _, c := range p.cc {
		c.Close()
	}
}

// each asks every ps at once, so that the command ends within one
// --timeout however many do not answer.
func (p *ratePS) each(ctx context.Context, call func(ctx context.Context, i int) error) []error {
	errs := make([]error, len(p.hosts))
	var wg sync.WaitGroup
	for i := range p.hosts {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, p.timeout)
			defer cancel()
			errs[i] = call(cctx, i)
		})
	}
	wg.Wait()
	return errs
}

// nextStep is one past the furthest ps's global step; false, said on
// stderr, if a ps did not answer or has not started its job.
func (p *ratePS) nextStep(ctx context.Context, stderr io.Writer) (int64, bool) {
	steps := make([]int64, len(p.hosts))
	errs := p.each(ctx, func(ctx context.Context, i int) error {
		st, err := p.conns[i].Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(true))
		if err == nil && !st.Initialized {
			err = fmt.Errorf("not initialised yet: its job has not started (a rate change needs the job's rule)")
		}
		if err == nil {
			steps[i] = st.GlobalStep
		}
		return err
	})
	from := int64(-1)
	for i, err := range errs {
		if err != nil {
			fmt.Fprintf(stderr, "paramserv rate: ps %d at %s: %s; nothing changed\n", i, p.hosts[i], statusWhy(p.hosts[i], p.timeout, err))
			return 0, false
		}
		from = max(from, steps[i]+1)
	}
	return from, true
}

// change asks every ps to take the rate lr and schedule from global step
// from on, says on stdout what each did, and returns the exit status: 1
// if a ps did not take it.
func (p *ratePS) change(ctx context.Context, lr float64, schedule string, from int64, stdout io.Writer) int {
	sched := schedule
	if sched == "" {
		sched = "constant"
	}
	req := &pb.ChangeRateRequest{Worker: 0, FromStep: from, LearningRate: lr, Schedule: schedule}
	at := make([]int64, len(p.hosts))
	errs := p.each(ctx, func(ctx context.Context, i int) error {
		resp, err := p.conns[i].ChangeRate(ctx, req, grpc.WaitForReady(true))
		if err == nil {
			at[i] = resp.GlobalStep
		}
		return err
	})
	code := 0
	for i, err := range errs {
		if err != nil {
			fmt.Fprintf(stdout, "ps %d at %s: did not take the change: %s\n", i, p.hosts[i], statusWhy(p.hosts[i], p.timeout, err))
			code = 1
			continue
		}
		late := ""
		if at[i] > from {
			late = fmt.Sprintf(" (it was at step %d: it switches at its next update)", at[i])
		}
		fmt.Fprintf(stdout, "ps %d at %s: learning rate %v, schedule %s, from global step %d%s\n", i, p.hosts[i], lr, sched, from, late)
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
