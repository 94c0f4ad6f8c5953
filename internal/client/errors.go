package client

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/wire"
)

// The errors a worker acts on are the project's own: a caller matches them
// with errors.Is and errors.As and never looks at gRPC status codes, which
// stay at the client's edge (this file).
var (
	// ErrUnavailable: a ps did not answer (down, restarting, unreachable,
	// or silent past its health checks). The worker waits for it to come
	// back and goes on.
	ErrUnavailable = errors.New("ps unavailable")
	// ErrNotReady: a ps answers but cannot serve the request yet (not
	// initialised, restored or rolled back under it, a synchronous step it
	// has not reached). The worker pulls again and goes on.
	ErrNotReady = errors.New("ps not ready")
	// ErrLayout: the ps holds other variables than this worker's model
	// (another --model, --hidden_units, or a checkpoint of another model).
	// Waiting does not help: the input must be fixed. See LayoutError.
	ErrLayout = errors.New("the model's variables differ from the ps's")
)

// LayoutError reports that ps PS holds other variables than this worker's
// model: Have is what the ps holds (or what it said of it), Want what the
// worker's model places on it. It matches ErrLayout.
type LayoutError struct {
	PS         int
	Addr       string
	Have, Want string
	Detail     string // what disagreed first, if known
	// Flag, if set, is the training flag (or "initial values") in which
	// the Init differed from the model the ps hold, Detail the ps's
	// account of it; Have and Want are then empty.
	Flag string
}

func (e *LayoutError) Error() string {
	if e.Flag != "" {
		return e.Detail
	}
	// The error that wraps it names the ps (ps 0 at host:port: ...).
	detail := ""
	if e.Detail != "" {
		detail = e.Detail + ": "
	}
	return fmt.Sprintf("%sthe ps holds %s; this worker's model has %s on it: the ps run another model (--model, --hidden_units, or a checkpoint of another model in --checkpoint_dir)", detail, e.Have, e.Want)
}

// Is makes a LayoutError match ErrLayout.
func (e *LayoutError) Is(target error) bool { return target == ErrLayout }

// Is makes a RestartedError match ErrNotReady: the worker pulls again.
func (e *RestartedError) Is(target error) bool { return target == ErrNotReady }

// kindError gives an error from the edge (a gRPC status, a socket error)
// one of the project's kinds while keeping its text and its chain.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string        { return e.err.Error() }
func (e *kindError) Unwrap() []error      { return []error{e.err, e.kind} }
func withKind(kind, err error) *kindError { return &kindError{kind: kind, err: err} }

// Retryable reports whether err is one a worker recovers from by waiting
// for the ps and pulling again (ErrUnavailable, ErrNotReady, a restarted
// ps), rather than one that ends the job (ErrLayout, a malformed request,
// a synchronous step that timed out with --sync_on_timeout=fail).
func Retryable(err error) bool {
	if err == nil || errors.Is(err, ErrLayout) || errors.Is(err, ErrVersion) {
		return false
	}
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotReady)
}

// classify gives an error that came from ps i (a gRPC status, a data-path
// reply) its kind. The ps's messages for a layout it does not hold become
// a LayoutError.
func (c *Client) classify(i int, err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotReady) || errors.Is(err, ErrLayout) || errors.Is(err, ErrVersion) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.Unavailable:
		return withKind(ErrUnavailable, err)
	case codes.FailedPrecondition:
		// A repeated Init with another layout (the ps restored or was given
		// another model): the shard's Conflict, marked by the server's
		// ErrorInfo detail (server.statusOf).
		if ok, flag := layoutConflict(st); ok {
			if flag != "" {
				return &LayoutError{PS: i, Addr: c.addrs[i], Detail: st.Message(), Flag: flag}
			}
			return &LayoutError{PS: i, Addr: c.addrs[i], Have: "other variables (" + st.Message() + ")", Want: c.layoutOf(i)}
		}
		return withKind(ErrNotReady, err)
	case codes.Aborted:
		return withKind(ErrNotReady, err)
	}
	return err
}

// layoutOf describes the variables and tables the model places on ps i.
func (c *Client) layoutOf(i int) string {
	var parts []string
	for _, p := range c.byPS[i] {
		parts = append(parts, fmt.Sprintf("%s[%d]", p.Name, p.Len))
	}
	s := fmt.Sprintf("%d variables %v", len(parts), parts)
	if n := len(c.opts.Tables); n > 0 {
		var ts []string
		for _, t := range c.opts.Tables {
			ts = append(ts, fmt.Sprintf("%s(dim %d)", t.Name, t.Dim))
		}
		s += fmt.Sprintf(" and %d tables %v", n, ts)
	}
	return s
}

// layoutConflict reports whether st carries the server's detail for a
// layout conflict, and the training flag it is about, if one.
func layoutConflict(st *status.Status) (ok bool, flag string) {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.Domain == wire.ErrorDomain && ei.Reason == wire.ReasonLayoutConflict {
			return true, ei.Metadata["flag"]
		}
	}
	return false, ""
}
