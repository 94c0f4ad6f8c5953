package cli

import (
	"flag"
	"fmt"

	"github.com/paramserv/paramserv/internal/trainer"
)

// validationFlags name the validation data a model's chief scores every
// --steps_to_validate local steps (issue 15). MNIST validates on the
// first 5,000 training images, which no worker trains on; sparse_lr on
// the files given here.
type validationFlags struct {
	data string
}

func defineValidationFlags(fs *flag.FlagSet) *validationFlags {
	f := &validationFlags{}
	fs.StringVar(&f.data, "validation_data", "", "sparse_lr: validation files, comma-separated (looked for under --data_dir too), neither training nor test files; the chief logs and summarises validation/val_log_loss, val_accuracy and val_auc on them every --steps_to_validate local steps (empty: no validation)")
	return f
}

// apply puts the flags into a trainer configuration; model is --model.
func (f *validationFlags) apply(cfg *trainer.Config, model string) error {
	if f.data != "" && model != "sparse_lr" {
		return fmt.Errorf("--validation_data is read by --model=sparse_lr only, not --model=%s (mnist validates on the first 5,000 training images, which no worker trains on)", model)
	}
	cfg.Data.ValidationData = f.data
	return nil
}
