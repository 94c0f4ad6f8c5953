package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/paramserv/paramserv/internal/version"
)

const usage = `paramserv: a parameter server for distributed machine-learning training.

Usage: paramserv <command> [flags]

Commands:
  train   run one task (a ps or a worker) of a training job
  local   run a whole cluster on this machine as separate processes
  bench   measure push, pull and pushpull against local ps, and verify them
  data    fetch public data sets (a9a, ap, fashion-mnist, ml-100k, mnist) with checksums, or make synthetic CTR data
  ckpt    list and inspect checkpoints
  certs   make a CA and per-task certificates for --tls_dir
  status  print each ps's step, mode, variables, tables, workers and checkpoints
  rate    change a running job's learning rate (and schedule) on every ps from one global step
  plot    draw runs' loss and metric curves (summary directories, result files) into a PNG
  eval    evaluate a checkpoint: the metrics and result file of the end of training
  export  write a checkpoint's model as one safetensors file (numpy, PyTorch)
  version the paramserv version, commit, Go version and wire protocol version (also --version)

Run 'paramserv <command> --help' for a command's flags.
`

// Main runs the paramserv command line and returns its exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "train":
		return Train(ctx, args[1:], stdout, stderr)
	case "local":
		return Local(ctx, args[1:], stdout, stderr)
	case "bench":
		return Bench(ctx, args[1:], stdout, stderr)
	case "data":
		return Data(ctx, args[1:], stdout, stderr)
	case "ckpt":
		defer exitOnSignal(ctx, stderr)()
		return Ckpt(ctx, args[1:], stdout, stderr)
	case "certs":
		defer exitOnSignal(ctx, stderr)()
		return Certs(args[1:], stdout, stderr)
	case "status":
		return Status(ctx, args[1:], stdout, stderr)
	case "rate":
		return Rate(ctx, args[1:], stdout, stderr)
	case "plot":
		defer exitOnSignal(ctx, stderr)()
		return Plot(ctx, args[1:], stdout, stderr)
	case "eval":
		defer exitOnSignal(ctx, stderr)()
		return Eval(ctx, args[1:], stdout, stderr)
	case "export":
		defer exitOnSignal(ctx, stderr)()
		return Export(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		if len(args) == 2 && (args[1] == "-h" || args[1] == "--help" || args[1] == "-help") {
			fmt.Fprint(stdout, "Usage: paramserv version (or paramserv --version)\n\nPrints the module version, the commit, the Go version and the wire\nprotocol's version. It takes no flags.\n")
			return 0
		}
		if len(args) > 1 {
			fmt.Fprintf(stderr, "paramserv version: takes no arguments, got %q\n", args[1])
			return 2
		}
		fmt.Fprint(stdout, version.Get().String())
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	if s := suggestCommand(args[0]); s != "" {
		fmt.Fprintf(stderr, "paramserv: unknown command %q\ndid you mean %s?\nrun 'paramserv --help' for the commands\n", args[0], s)
		return 2
	}
	fmt.Fprintf(stderr, "paramserv: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// commands are Main's commands, for suggestions.
var commands = []string{"train", "local", "bench", "data", "ckpt", "certs", "status", "rate", "plot", "eval", "export", "version"}

// suggestCommand is the command closest to a mistyped one (ckpts, exprt),
// "" if none is within two edits.
func suggestCommand(name string) string {
	best, bestD := "", 3
	for _, c := range commands {
		if d := editDistance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// extraArg reports a positional argument left after the flags of a command
// that takes none, with exit status 2; bad is false if there is none.
func extraArg(fs *flag.FlagSet, stderr io.Writer) (code int, bad bool) {
	if fs.NArg() == 0 {
		return 0, false
	}
	fmt.Fprintf(stderr, "%s: unexpected argument %q (flags are written --name=value)\n", fs.Name(), fs.Arg(0))
	return 2, true
}
