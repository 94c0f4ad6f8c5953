package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/testutil"
	"github.com/paramserv/paramserv/internal/version"
	"github.com/paramserv/paramserv/internal/wire"
)

// A ps that is down (connection refused) is ErrUnavailable by either path,
// a kind the worker recovers from, whatever moment of the call failed
// (here the data path's dial).
func TestDownPSIsUnavailable(t *testing.T) {
	addr := testutil.RefusedAddr(t)
	vars := []model.Variable{{Name: "w", Shape: []int{3}}}
	for _, grpcOnly := range []bool{false, true} {
		c, err := New([]string{addr}, vars, Options{GRPCOnly: grpcOnly})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err = c.Pull(ctx, 0, model.NewParams(vars))
		cancel()
		c.Close()
		if !errors.Is(err, ErrUnavailable) || !Retryable(err) || errors.Is(err, ErrLayout) {
			t.Errorf("gRPC only %v: pull from a ps that is down: %v; want ErrUnavailable, retryable", grpcOnly, err)
		}
	}
}

// A ps's layout conflict is told from "not initialised yet" (both
// FailedPrecondition) by the server's ErrorInfo detail, not by the
// message's text: with the detail it is ErrLayout, an input to fix;
// without it, whatever the message says, a ps to wait for.
func TestLayoutConflictByDetail(t *testing.T) {
	vars := []model.Variable{{Name: "w", Shape: []int{3}}}
	c, err := New([]string{"127.0.0.1:1"}, vars, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := "ps 0 is already initialised with a different layout: w has 2 values"
	conflict, err := status.New(codes.FailedPrecondition, msg).WithDetails(&errdetails.ErrorInfo{Domain: wire.ErrorDomain, Reason: wire.ReasonLayoutConflict})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.classify(0, conflict.Err()); !errors.Is(err, ErrLayout) || Retryable(err) {
		t.Errorf("FailedPrecondition with the conflict detail: %v; want ErrLayout, not retryable", err)
	}
	if err := c.classify(0, status.Error(codes.FailedPrecondition, msg)); errors.Is(err, ErrLayout) || !Retryable(err) {
		t.Errorf("FailedPrecondition without the detail: %v; want ErrNotReady, retryable", err)
	}
}

// Every kind of a ps's error gets the client kind the worker acts on, the
// same whether it came in a data-path reply or as a gRPC status.
func TestErrorKinds(t *testing.T) {
	vars := []model.Variable{{Name: "w", Shape: []int{3}}}
	c, err := New([]string{"127.0.0.1:1"}, vars, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		kind      wire.ErrorKind
		is        error // nil: none of the client's kinds
		retryable bool
	}{
		{wire.KindInvalid, nil, false},
		{wire.KindNotReady, ErrNotReady, true},
		{wire.KindConflict, ErrLayout, false},
		{wire.KindBehind, ErrNotReady, true},
		{wire.KindFailed, nil, false},
		{wire.KindRestored, ErrNotReady, true},
		{wire.KindCacheMiss, ErrNotReady, true},
		{wire.KindInternal, nil, false},
		{wire.KindUnavailable, ErrUnavailable, true},
		{wire.KindMalformed, nil, false},
		{wire.ErrorKind(1000), nil, false}, // a newer ps's
	} {
		msg := "ps 0: " + tc.kind.String()
		err := c.classify(0, &psError{tc.kind, msg})
		for _, k := range []error{ErrNotReady, ErrUnavailable, ErrLayout} {
			if errors.Is(err, k) != (k == tc.is) {
				t.Errorf("%v: %v; errors.Is(%v) = %v", tc.kind, err, k, errors.Is(err, k))
			}
		}
		if Retryable(err) != tc.retryable || !strings.Contains(err.Error(), msg) && tc.is != ErrLayout {
			t.Errorf("%v: %v, retryable %v; want %v", tc.kind, err, Retryable(err), tc.retryable)
		}
		if tc.kind == wire.KindCacheMiss || tc.kind == wire.KindMalformed || tc.kind > wire.KindMalformed {
			continue // not answered by gRPC
		}
		st := status.New(codes.Code(wire.GRPCCode(tc.kind)), msg)
		if tc.kind == wire.KindConflict {
			st, _ = st.WithDetails(&errdetails.ErrorInfo{Domain: wire.ErrorDomain, Reason: wire.ReasonLayoutConflict})
		}
		if gerr := c.classify(0, st.Err()); errClass(gerr) != errClass(err) {
			t.Errorf("%v: gRPC %v (%s), data path %v (%s)", tc.kind, gerr, errClass(gerr), err, errClass(err))
		}
	}
}

// A ps refusing a worker of another protocol version is told by the
// refusal's detail or the version its answer carries, never by the text.
func TestVersionRefusal(t *testing.T) {
	check := versionCheck()
	call := func(hdr metadata.MD, err error) error {
		return check(context.Background(), "/paramserv.v1.ParamServer/Status", nil, nil, nil,
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
				for _, o := range opts {
					if h, ok := o.(grpc.HeaderCallOption); ok {
						*h.HeaderAddr = hdr
					}
				}
				return err
			})
	}
	msg := "wire protocol mismatch: this ps speaks protocol 1, the worker speaks protocol 2"
	refusal, _ := status.New(codes.FailedPrecondition, msg).WithDetails(&errdetails.ErrorInfo{Domain: wire.ErrorDomain, Reason: wire.ReasonVersionMismatch})
	if err := call(nil, refusal.Err()); !errors.Is(err, ErrVersion) || Retryable(err) {
		t.Errorf("refusal with the detail: %v, want ErrVersion", err)
	}
	if err := call(metadata.Pairs(version.Header, "999"), refusal.Err()); !errors.Is(err, ErrVersion) || err.Error() != msg {
		t.Errorf("refusal by a ps of protocol 999: %v, want ErrVersion with the ps's message (it names both versions)", err)
	}
	if err := call(metadata.Pairs(version.Header, "999"), nil); !errors.Is(err, ErrVersion) {
		t.Errorf("answer of a ps of protocol 999: %v, want ErrVersion", err)
	}
	if err := call(nil, status.Error(codes.FailedPrecondition, msg)); errors.Is(err, ErrVersion) {
		t.Errorf("FailedPrecondition without the detail or the ps's version: %v; the text alone must not make ErrVersion", err)
	}
}
