package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// SignalError is the cause of the context Main runs under once the process
// has received SIGTERM or SIGINT (see NotifySignals). A task stopped by one
// before its work was done exits with ExitCode, 128 plus the signal's
// number as shells report it (143 for SIGTERM, 130 for SIGINT): a death,
// not a success, and one that `paramserv local` tells apart from a failure
// of the task's own (exit 1) or input to fix (exit 2).
type SignalError struct{ Sig syscall.Signal }

func (e *SignalError) Error() string { return "received " + signalName(e.Sig) }

// ExitCode is 128 plus the signal's number.
func (e *SignalError) ExitCode() int { return 128 + int(e.Sig) }

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return fmt.Sprintf("signal %d (%v)", int(s), s)
}

// NotifySignals returns a context that ends with a *SignalError as its
// cause when the process receives SIGTERM or SIGINT. Later signals are
// caught and ignored until stop is called; stop restores the default
// handling and releases the context.
func NotifySignals(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		select {
		case s := <-ch:
			sig, _ := s.(syscall.Signal)
			cancel(&SignalError{Sig: sig})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel(context.Canceled)
	}
}

// exitOnSignal is for the commands that do not watch ctx (ckpt, certs,
// export, eval, plot): NotifySignals catches SIGINT and SIGTERM for every
// command, so without it Ctrl-C did nothing to a command blocked reading a
// pipe or busy with a large checkpoint. On a signal it removes the
// temporary files the command registered (addTemp) and exits 128+signal.
// stop ends the watch.
func exitOnSignal(ctx context.Context, stderr io.Writer) (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			var se *SignalError
			if errors.As(context.Cause(ctx), &se) {
				temps.Range(func(name, _ any) bool {
					os.Remove(name.(string))
					return true
				})
				fmt.Fprintf(stderr, "paramserv: %v; stopped\n", se)
				os.Exit(se.ExitCode())
			}
		case <-done:
		}
	}()
	return func() { close(done) }
}

// temps are the temporary files being written, removed on a signal.
var temps sync.Map

// addTemp registers a temporary file; its release unregisters it.
func addTemp(name string) (release func()) {
	temps.Store(name, true)
	return func() { temps.Delete(name) }
}

// signalled reports the exit status of a command stopped by a signal
// (ctx is NotifySignals' context): 128+signal, and whether it was.
func signalled(ctx context.Context) (int, bool) {
	var se *SignalError
	if errors.As(context.Cause(ctx), &se) {
		return se.ExitCode(), true
	}
	return 0, false
}
