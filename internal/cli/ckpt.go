package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/vfs"
)

var ckptUsage = `Usage: paramserv ckpt <command> DIR [flags]

Commands:
  ls DIR                 every checkpoint with step, time, size, variables, tables and status (ok, or why damaged);
                         DIR/ckpt-N: that one
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
		intro = "Usage: paramserv ckpt ls DIR\n\nLists every checkpoint of DIR with its step, time, size, variables, tables\nand status (ok, or why it is damaged), set-aside ones included; DIR/ckpt-N,\nas ls names it, lists that one.\n"
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
	rest := fs.Args()
	if dir == "" && len(rest) > 0 {
		dir, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "paramserv ckpt %s: unexpected argument %q: it takes one directory (flags are written --name=value)\n", cmd, rest[0])
		return 2
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
	if err := checkpointDirArg(dir); err != nil {
		fmt.Fprintf(stderr, "paramserv ckpt %s: %v\n", cmd, err)
		return 2
	}
	if *step < 0 && *step != checkpoint.LatestStep {
		fmt.Fprintf(stderr, "paramserv ckpt %s: --step=%d: want a step >= 0 (or no --step: the latest valid one)\n", cmd, *step)
		return 2
	}
	switch cmd {
	case "ls":
		// ckpt/ckpt-3000, as ls names it, lists that one checkpoint.
		parent, one, _ := resolveCheckpoint(dir, checkpoint.LatestStep, false)
		l, err := checkpoint.Verifier{Finite: true}.List(vfs.OS, parent)
		if err != nil {
			fmt.Fprintf(stderr, "paramserv ckpt ls: %v\n", err)
			return 1
		}
		if one != checkpoint.LatestStep {
			l.Entries = slices.DeleteFunc(l.Entries, func(e checkpoint.Entry) bool { return e.Step != one })
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

// checkpointDirArg checks that the checkpoint directory a user named is a
// directory: a name that is not there, or a file, is input to fix (exit
// 2), not a failure while running.
func checkpointDirArg(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: no such directory (want a --checkpoint_dir, holding ckpt-N/, or one ckpt-N in it)", dir)
	case err != nil:
		return fmt.Errorf("%s: %v", dir, errors.Unwrap(err))
	case !fi.IsDir():
		return fmt.Errorf("%s: not a directory (want a --checkpoint_dir, holding ckpt-N/, or one ckpt-N in it)", dir)
	}
	return nil
}
