package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
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
		return dataSynthCTR(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, dataUsage)
		return 0
	}
	fmt.Fprintf(stderr, "paramserv data: unknown command %q\n\n%s", args[0], dataUsage)
	return 2
}

var dataUsage = `Usage: paramserv data <command>

Commands:
  fetch DATASET [--dir=DIR]                download DATASET (` + strings.Join(fetch.Datasets(), ", ") + `) into DIR/DATASET/
                                           and verify SHA-256 checksums; DIR defaults to $PARAMSERV_DATA, else
                                           the user's cache (~/.cache/paramserv/data), where --data_dir looks too
  synth-ctr --rows=N --fields=F --out=DIR  write a reproducible CTR-like data set with a planted model
`

func dataFetch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv data fetch", flag.ContinueOnError)
	def, defErr := fetch.DefaultDir()
	dir := fs.String("dir", def, "directory to store the data set in (as DIR/<dataset>/); --data_dir of train and local defaults to the same")
	mirror := fs.String("mirror", "", "base URL to download from instead of the public mirrors (ending in /)")
	// The data set name may come before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	help := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: paramserv data fetch DATASET [--dir=DIR]\n\nDownloads DATASET (%s) from its public sources into DIR/DATASET/ and\nverifies each file's SHA-256.\n", strings.Join(fetch.Datasets(), ", "))
		printFlags(w, fs, false, nil)
	}
	if code, done := parseArgs(fs, args, stdout, stderr, help); done {
		return code
	}
	rest := fs.Args()
	if name == "" && len(rest) > 0 {
		name, rest = rest[0], rest[1:]
	}
	if name == "" {
		fmt.Fprintf(stderr, "paramserv data fetch: name a data set: %s\n", strings.Join(fetch.Datasets(), " or "))
		return 2
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "paramserv data fetch: unexpected argument %q: it fetches one data set (flags are written --name=value)\n", rest[0])
		return 2
	}
	var mirrors []string
	if *mirror != "" {
		if u, err := url.Parse(*mirror); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			fmt.Fprintf(stderr, "paramserv data fetch: --mirror=%s: want an http:// or https:// URL (the base the files' names are appended to)\n", *mirror)
			return 2
		}
		mirrors = []string{*mirror}
	}
	if *dir == "" {
		why := "want the directory to store the data set in"
		if defErr != nil {
			why = defErr.Error()
		}
		fmt.Fprintf(stderr, "paramserv data fetch: give --dir: %s\n", why)
		return 2
	}
	if slices.Contains(fetch.Datasets(), name) {
		if err := checkOutDir(*dir); err != nil {
			fmt.Fprintf(stderr, "paramserv data fetch: --dir=%s: %v\n", *dir, err)
			return 2
		}
	}
	f := fetch.Fetcher{Logf: newLogger(stderr)}
	if err := f.Fetch(ctx, name, *dir, mirrors); err != nil {
		fmt.Fprintf(stderr, "paramserv data fetch: %v\n", err)
		if code, ok := signalled(ctx); ok {
			return code
		}
		if errors.Is(err, fetch.ErrUnknownDataset) {
			return 2
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s is in %s\n", name, *dir)
	return 0
}

// dataSynthCTR is `paramserv data synth-ctr`. Its flags are written with
// underscores like every other command's (--test_rows); the hyphenated
// forms synth's own flag set uses (--test-rows) are accepted as well.
func dataSynthCTR(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	own := flag.NewFlagSet("synth-ctr", flag.ContinueOnError)
	cfg := synth.DefaultConfig()
	cfg.RegisterFlags(own)
	fs := flag.NewFlagSet("paramserv data synth-ctr", flag.ContinueOnError)
	hyphenated := map[string]string{} // a flag of fs -> its name in own
	hidden := map[string]bool{}
	own.VisitAll(func(fl *flag.Flag) {
		name := strings.ReplaceAll(fl.Name, "-", "_")
		fs.Var(fl.Value, name, strings.ReplaceAll(fl.Usage, "`", ""))
		hyphenated[name] = fl.Name
		if name != fl.Name {
			fs.Var(fl.Value, fl.Name, fl.Usage)
			hyphenated[fl.Name], hidden[fl.Name] = fl.Name, true
		}
	})
	help := func(w io.Writer) {
		fmt.Fprint(w, "Usage: paramserv data synth-ctr --out=DIR [flags]\n\nWrites a reproducible CTR-like data set in Criteo's format with a planted\nlogistic model, and reports what the planted model itself scores on the\ntest rows (the best any model can do).\n")
		printFlags(w, fs, false, hidden)
	}
	if code, done := parseArgs(fs, args, stdout, stderr, help); done {
		return code
	}
	if code, bad := extraArg(fs, stderr); bad {
		return code
	}
	var pass []string
	fs.Visit(func(fl *flag.Flag) { pass = append(pass, "--"+hyphenated[fl.Name]+"="+fl.Value.String()) })
	if err := synth.Command(ctx, pass, stdout); err != nil {
		fmt.Fprintf(stderr, "paramserv data synth-ctr: %v\n", err)
		if code, ok := signalled(ctx); ok {
			return code // stopped, not input to fix
		}
		return 2
	}
	return 0
}
