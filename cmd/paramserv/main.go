// Command paramserv is a parameter server for distributed machine-learning
// training. See `paramserv --help` and README.md.
package main

import (
	"context"
	"os"

	"github.com/paramserv/paramserv/internal/cli"
)

func main() {
	// SIGTERM and SIGINT end the context with a *cli.SignalError; a task
	// they stop before its work is done exits 128+signal (143, 130).
	ctx, stop := cli.NotifySignals(context.Background())
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
