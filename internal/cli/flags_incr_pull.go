package cli

import (
	"flag"

	"github.com/paramserv/paramserv/internal/trainer"
)

// incrPullFlags turn on incremental sparse pulls (issue 18).
type incrPullFlags struct {
	on bool
}

func defineIncrPullFlags(fs *flag.FlagSet) *incrPullFlags {
	f := &incrPullFlags{}
	fs.BoolVar(&f.on, "incremental_pull", false, "sparse tables: each worker keeps the rows it pulled with the version of the ps's table they are of, and a pull asks only for the rows changed since and those it does not hold (the values read are bit for bit those of a full pull; the worker's memory grows with the rows it keeps, at most 4Mi rows per table and ps). Dense variables are pulled in full. Needs ps of this version on the data path; others get full pulls")
	return f
}

// apply puts the flag into a trainer configuration.
func (f *incrPullFlags) apply(cfg *trainer.Config) { cfg.IncrementalPull = f.on }
