package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/paramserv/paramserv/internal/bench"
	"github.com/paramserv/paramserv/internal/secure"
)

var benchAuthNames = []string{"none", "tls", "token", "tls+token"}

func benchAuthModes(list string) ([]string, error) {
	var modes []string
	for m := range strings.SplitSeq(list, ",") {
		m = strings.TrimSpace(m)
		found := false
		for _, n := range benchAuthNames {
			found = found || m == n
		}
		if !found {
			return nil, fmt.Errorf("--auth: unknown %q (want a comma-separated list of %s)", m, strings.Join(benchAuthNames, ", "))
		}
		modes = append(modes, m)
	}
	return modes, nil
}

// benchAuth runs every case once per authentication mode, the modes in
// turn for each case (so a drift of the machine touches them alike), with
// certificates and a token made for the run.
func benchAuth(ctx context.Context, cfg bench.Config, modes []string, baseline, asJSON bool, exe string, psLog io.Writer, stdout io.Writer, logf func(string, ...any)) int {
	dir, err := os.MkdirTemp("", "paramserv-bench-auth-")
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer os.RemoveAll(dir)
	lo := make([]string, cfg.NumPS+cfg.NumWorkers)
	for i := range lo {
		lo[i] = "127.0.0.1"
	}
	certs := filepath.Join(dir, "tls")
	if _, err := secure.MakeCerts(secure.CertsConfig{PS: lo[:cfg.NumPS], Workers: lo[cfg.NumPS:], Out: certs, Valid: 24 * time.Hour}); err != nil {
		logf("making certificates: %v", err)
		return 1
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("a-token-made-for-this-bench-run\n"), 0o600); err != nil {
		logf("%v", err)
		return 1
	}
	type mode struct {
		name   string
		psArgs []string
		files  secure.Files
	}
	var ms []mode
	for _, m := range modes {
		var md mode
		md.name = m
		if strings.Contains(m, "tls") {
			md.psArgs = append(md.psArgs, "--tls_dir="+certs)
			md.files.Dir = certs
		}
		if strings.Contains(m, "token") {
			md.psArgs = append(md.psArgs, "--auth_token_file="+token)
			md.files.TokenFile = token
		}
		ms = append(ms, md)
	}
	if baseline {
		bp, err := bench.StartBaselineProcess(ctx, exe, "bench", "--baseline_server")
		if err != nil {
			logf("%v", err)
			return 1
		}
		defer bp.Close()
		cfg.BaselineAddr, cfg.BaselinePID = bp.Addr, bp.PID()
		logf("baseline server (child process) at %s", bp.Addr)
	}
	emit := func(bench.Result) {}
	if asJSON {
		emit = func(r bench.Result) { _ = bench.WriteJSON(stdout, r) }
	}
	var all []bench.Result
	var failed error
	run := func(m mode, cases []bench.Case, memOps int) bool {
		p, err := secure.Load(m.files, "worker", 0, "")
		if err != nil {
			logf("%v", err)
			return false
		}
		c := cfg
		c.Cases, c.MemOps = cases, memOps
		c.Start = bench.ProcessStarter(exe, psLog, m.psArgs...)
		c.Dial = p.Dialer(nil)
		c.Emit = func(r bench.Result) {
			r.Auth = m.name
			emit(r)
		}
		rs, err := bench.Run(ctx, c)
		for _, r := range rs {
			r.Auth = m.name
			r.Case += " " + m.name
			all = append(all, r)
		}
		if err != nil {
			failed = err
		}
		return ctx.Err() == nil
	}
	for _, c := range cfg.Cases {
		for _, m := range ms {
			if !run(m, []bench.Case{c}, 0) {
				break
			}
		}
	}
	if cfg.MemOps > 0 {
		for _, m := range ms {
			run(m, nil, cfg.MemOps)
		}
	}
	if !asJSON {
		_ = bench.WriteTable(stdout, all)
	}
	if failed != nil {
		logf("failed: %v", failed)
		return 1
	}
	return 0
}
