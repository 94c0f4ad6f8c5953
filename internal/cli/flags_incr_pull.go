package cli

import (
	"flag"

	"github.com/paramserv/paramserv/internal/trainer"
)

// incrPullFlags turn on incremental pulls of rows and dense blocks (issue 18).
type incrPullFlags struct {
	on bool
}

func defineIncrPullFlags(fs *flag.FlagSet) *incrPullFlags {
	f := &incrPullFlags{}
	fs.BoolVar(&f.on, "incremental_pull", false, "each worker keeps what it pulls, sparse rows and dense values, with the version of the ps's values they are of, and a pull asks only for what changed since: rows changed or not held, and dense blocks of 16Ki values changed (the values read are bit for bit those of a full pull). The worker keeps a copy of its dense variables and the rows it pulled (at most 4Mi rows per table and ps); when nearly everything changes between pulls (as in asynchronous dense training) it stops asking for a while, so the cost stays near zero. Data path only; a ps of an older version gets full pulls (dense, or all), gRPC pulls are full, and --replicas refuses it")
	return f
}

// apply puts the flag into a trainer configuration.
func (f *incrPullFlags) apply(cfg *trainer.Config) { cfg.IncrementalPull = f.on }
