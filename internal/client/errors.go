package client

import (
	"errors"
	"fmt"

	"github.com/paramserv/paramserv/internal/wire"
)

// The errors a worker acts on are the project's own: a caller matches them
// with errors.Is and errors.As and never looks at gRPC status codes, which
// stay at the client's gRPC edge (grpc.go). An error of a ps has one of
// the shard's error kinds (wire.ErrorKind), which the data path carries as
// it is and grpc.go reads from a status; classify gives it its client
// kind.
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

// classify gives an error that came from ps i (a data-path reply, a gRPC
// status, a socket error) its kind. The ps's answer that it holds another
// layout becomes a LayoutError.
func (c *Client) classify(i int, err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotReady) || errors.Is(err, ErrLayout) || errors.Is(err, ErrVersion) {
		return err
	}
	var pe *psError
	if errors.As(err, &pe) {
		return c.ofKind(i, pe.kind, pe.msg, err)
	}
	return c.classifyStatus(i, err)
}

// ofKind gives err, of the ps's kind and message, its client kind.
func (c *Client) ofKind(i int, kind wire.ErrorKind, msg string, err error) error {
	switch kind {
	case wire.KindUnavailable:
		return withKind(ErrUnavailable, err)
	case wire.KindConflict:
		return &LayoutError{PS: i, Addr: c.addrs[i], Have: "other variables (" + msg + ")", Want: c.layoutOf(i)}
	case wire.KindNotReady, wire.KindBehind, wire.KindRestored, wire.KindCacheMiss:
		return withKind(ErrNotReady, err)
	}
	return err
}

// psError is an error the ps answered on the data path: its kind (the
// shard's error kinds, wire.ErrorKind) and its message, which is the
// error's text.
type psError struct {
	kind wire.ErrorKind
	msg  string
}

func (e *psError) Error() string { return e.msg }

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
