package cli

import (
	"flag"
	"fmt"

	"github.com/paramserv/paramserv/internal/trainer"
)

// dataFlags are the flags of streamed training data (issue 18): a sparse
// model's worker reads its part of the files as a stream instead of
// loading it whole.
type dataFlags struct {
	shuffleBuffer int
	epochs        int
}

func defineDataFlags(fs *flag.FlagSet) *dataFlags {
	f := &dataFlags{}
	fs.IntVar(&f.shuffleBuffer, "shuffle_buffer", 0, "sparse_lr: stream the training files instead of loading them: read them in the background, pass after pass until --train_steps (\".gz\" files decompressed), and shuffle within a buffer of this many rows; a worker then holds about this many rows, not its whole part (0: load the whole part and shuffle it all; 1: file order)")
	fs.IntVar(&f.epochs, "epochs", 0, "sparse_lr: passes over each worker's part of the training files; a worker whose data ends is done, and the job ends when every worker's has (or at --train_steps, whichever comes first); with --sync_replicas and several workers it needs --sync_on_timeout=proceed (0: no end, pass after pass until --train_steps)")
	return f
}

// apply puts the flags into a trainer configuration.
func (f *dataFlags) apply(cfg *trainer.Config) error {
	if f.shuffleBuffer < 0 {
		return fmt.Errorf("--shuffle_buffer=%d: want 0 (load the whole part) or a number of rows", f.shuffleBuffer)
	}
	cfg.Data.ShuffleBuffer = f.shuffleBuffer
	if f.epochs < 0 {
		return fmt.Errorf("--epochs=%d: want 0 (no end: until --train_steps) or a number of passes", f.epochs)
	}
	if f.epochs > 0 && cfg.Model != "sparse_lr" {
		return fmt.Errorf("--epochs=%d: --model=%s reads its data until --train_steps; only sparse_lr counts passes (drop --epochs or choose --model=sparse_lr)", f.epochs, cfg.Model)
	}
	cfg.Data.Epochs = f.epochs
	return trainer.CheckEpochs(*cfg)
}
