package cli

import (
	"flag"
	"fmt"

	"github.com/paramserv/paramserv/internal/trainer"
)

// defaultFullEvery is --full_checkpoint_every's default: a restore then
// reads one full checkpoint and at most 9 deltas, which with a few percent
// of the rows touched between saves is well under twice a full one, while
// the saves write about a tenth of what full ones would.
const defaultFullEvery = 10

// ckptIncrFlags turn on incremental checkpoints (issue 18).
type ckptIncrFlags struct {
	incremental bool
	fullEvery   int
}

func defineCkptIncrFlags(fs *flag.FlagSet) *ckptIncrFlags {
	f := &ckptIncrFlags{}
	fs.BoolVar(&f.incremental, "incremental_checkpoints", false, "between full checkpoints each ps writes only the rows and dense variables changed since the previous checkpoint, as a delta chained to it (restores apply the chain; pruning keeps what a kept checkpoint needs)")
	fs.IntVar(&f.fullEvery, "full_checkpoint_every", defaultFullEvery, "with --incremental_checkpoints: every this many saves is a full checkpoint (1: all full), which bounds a restore's chain")
	return f
}

// apply puts the flags into a trainer configuration; set says whether a
// flag was given.
func (f *ckptIncrFlags) apply(cfg *trainer.Config, set func(string) bool) error {
	switch {
	case f.fullEvery < 1:
		return fmt.Errorf("--full_checkpoint_every=%d: want a number >= 1", f.fullEvery)
	case set("full_checkpoint_every") && !f.incremental:
		return fmt.Errorf("--full_checkpoint_every is read only with --incremental_checkpoints")
	case f.incremental && cfg.CheckpointDir == "":
		return fmt.Errorf("--incremental_checkpoints needs --checkpoint_dir (and --save_steps or --save_model_secs)")
	}
	cfg.IncrementalCheckpoints, cfg.FullCheckpointEvery = f.incremental, f.fullEvery
	return nil
}
