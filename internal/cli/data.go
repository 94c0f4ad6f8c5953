package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/paramserv/paramserv/internal/data/fetch"
	"github.com/paramserv/paramserv/internal/data/synth"
)

// Data is `paramserv data`: fetch public data sets (and, later, generate
// synthetic ones).
func Data(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, dataUsage)
		return 2
	}
	switch args[0] {
	case "fetch":
		return dataFetch(ctx, args[1:], stdout, stderr)
	case "synth-ctr":
		if err := synth.Command(ctx, args[1:], stdout); err != nil {
			fmt.Fprintf(stderr, "paramserv data synth-ctr: %v\n", err)
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, dataUsage)
		return 0
	}
	fmt.Fprintf(stderr, "paramserv data: unknown command %q\n\n%s", args[0], dataUsage)
	return 2
}

var dataUsage = `Usage: paramserv data <command>

Commands:
  fetch mnist|fashion-mnist|ml-100k [--dir DIR]   download from the public mirrors and verify SHA-256 checksums
  synth-ctr --rows=N --fields=F --out=DIR  write a reproducible CTR-like data set with a planted model
`

func dataFetch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv data fetch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def, _ := fetch.DefaultDir()
	dir := fs.String("dir", def, "directory to store the data set in (as DIR/<dataset>/); --data_dir of train and local defaults to the same")
	mirror := fs.String("mirror", "", "base URL to download from instead of the public mirrors (ending in /)")
	// The data set name may come before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if name == "" {
		fmt.Fprintf(stderr, "paramserv data fetch: name a data set: %s\n", strings.Join(fetch.Datasets(), " or "))
		return 2
	}
	var mirrors []string
	if *mirror != "" {
		mirrors = []string{*mirror}
	}
	f := fetch.Fetcher{Logf: newLogger(stderr)}
	if err := f.Fetch(ctx, name, *dir, mirrors); err != nil {
		fmt.Fprintf(stderr, "paramserv data fetch: %v\n", err)
		if errors.Is(err, fetch.ErrUnknownDataset) {
			return 2
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s is in %s\n", name, *dir)
	return 0
}
