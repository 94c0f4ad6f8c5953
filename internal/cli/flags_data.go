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
}

func defineDataFlags(fs *flag.FlagSet) *dataFlags {
	f := &dataFlags{}
	fs.IntVar(&f.shuffleBuffer, "shuffle_buffer", 0, "sparse_lr: stream the training files instead of loading them: read them in the background, pass after pass until --train_steps (\".gz\" files decompressed), and shuffle within a buffer of this many rows; a worker then holds about this many rows, not its whole part (0: load the whole part and shuffle it all; 1: file order)")
	return f
}

// apply puts the flags into a trainer configuration.
func (f *dataFlags) apply(cfg *trainer.Config) error {
	if f.shuffleBuffer < 0 {
		return fmt.Errorf("--shuffle_buffer=%d: want 0 (load the whole part) or a number of rows", f.shuffleBuffer)
	}
	cfg.Data.ShuffleBuffer = f.shuffleBuffer
	return nil
}
