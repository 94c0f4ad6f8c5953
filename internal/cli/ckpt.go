package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/vfs"
)

var ckptUsage = `Usage: paramserv ckpt <command> DIR [flags]

Commands:
  ls DIR                 every checkpoint with step, time, size, variables, tables and status (ok, or why damaged)
  inspect DIR [--step=N] names, shapes, dtypes and statistics of the latest valid checkpoint (or of step N;
                         DIR/ckpt-N, as ls names it, is step N)

Run 'paramserv ckpt <command> --help' for a command's flags.
`

// Ckpt is `paramserv ckpt`: look into a checkpoint directory.
func Ckpt(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, ckptUsage)
		return 2
	}
	cmd, args := args[0], args[1:]
	var intro string
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, ckptUsage)
		return 0
	case "ls":
		intro = "Usage: paramserv ckpt ls DIR\n\nLists every checkpoint of DIR with its step, time, size, variables, tables\nand status (ok, or why it is damaged), set-aside ones included.\n"
	case "inspect":
		intro = "Usage: paramserv ckpt inspect DIR [--step=N]\n\nNames, shapes, dtypes and statistics of the variables and tables of the\nlatest valid checkpoint of DIR, or of step N.\n"
	default:
		fmt.Fprintf(stderr, "paramserv ckpt: unknown command %q\n\n%s", cmd, ckptUsage)
		return 2
	}
	fs := flag.NewFlagSet("paramserv ckpt "+cmd, flag.ContinueOnError)
	step := new(int64)
	*step = checkpoint.LatestStep
	if cmd == "inspect" {
		fs.Int64Var(step, "step", checkpoint.LatestStep, "the checkpoint's step (default: the latest valid one)")
	}
	help := func(w io.Writer) {
		fmt.Fprint(w, intro)
		printFlags(w, fs, false, nil)
	}
	var dir string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		dir, args = args[0], args[1:]
	}
	if code, done := parseArgs(fs, args, stdout, stderr, help); done {
		return code
	}
	if dir == "" && fs.NArg() > 0 {
		dir = fs.Arg(0)
	}
	if dir == "" {
		fmt.Fprintf(stderr, "paramserv ckpt %s: name the checkpoint directory\n", cmd)
		help(stderr)
		return 2
	}
	stepSet := false
	fs.Visit(func(fl *flag.Flag) { stepSet = stepSet || fl.Name == "step" })
	if cmd == "inspect" {
		// ckpt/ckpt-3000, as ckpt ls names it, is ckpt at step 3000.
		var err error
		if dir, *step, err = resolveCheckpoint(dir, *step, stepSet); err != nil {
			fmt.Fprintf(stderr, "paramserv ckpt inspect: %v\n", err)
			return 2
		}
	}
	if *step < 0 && *step != checkpoint.LatestStep {
		fmt.Fprintf(stderr, "paramserv ckpt %s: --step=%d: want a step >= 0 (or no --step: the latest valid one)\n", cmd, *step)
		return 2
	}
	switch cmd {
	case "ls":
		l, err := checkpoint.List(vfs.OS, dir)
		if err != nil {
			fmt.Fprintf(stderr, "paramserv ckpt ls: %v\n", err)
			return 1
		}
		fmt.Fprint(stdout, l.String())
	case "inspect":
		in, err := checkpoint.Inspect(vfs.OS, dir, *step)
		if err != nil {
			fmt.Fprintf(stderr, "paramserv ckpt inspect: %v\n", err)
			return 1
		}
		fmt.Fprint(stdout, in.String())
	}
	return 0
}
