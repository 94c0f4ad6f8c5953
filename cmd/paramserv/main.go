// Command paramserv is a parameter server for distributed machine-learning
// training. See `paramserv --help` and README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/paramserv/paramserv/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
